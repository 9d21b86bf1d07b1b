//! `simulate --timeline FILE|demo [--report FILE.html]`: read the timeline, run it, render the
//! output, write the report. Nothing is printed or written until the run succeeded.

use std::path::PathBuf;
use std::sync::Arc;

use super::engine::{self, RunError};
use super::file::{self, TimelineFileError};
use super::{html, output, DEMO, DEMO_NAME};
use crate::catalog::{known_regions, CatalogError, OutputFormat};
use crate::disruption::Options;
use crate::sim::catalog_file::{self, CatalogFileError};
use crate::sim::scenario::Catalog;

#[derive(Debug, Clone)]
pub struct TimelineArgs {
    /// The timeline file, or `demo` for the built-in one.
    pub timeline: PathBuf,
    pub region: String,
    pub catalog: Option<PathBuf>,
    pub output: OutputFormat,
    pub report: Option<PathBuf>,
}

/// Why a timeline produced no output; one line each.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error(transparent)]
    File(#[from] TimelineFileError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    CatalogFile(#[from] CatalogFileError),
    #[error(transparent)]
    Region(#[from] CatalogError),
    #[error("--report {file}: {source}")]
    Report { file: String, source: std::io::Error },
}

/// Runs the timeline and returns what the command prints.
pub fn run(args: &TimelineArgs) -> Result<String, TimelineError> {
    let (name, text) = if args.timeline.as_os_str() == DEMO_NAME {
        (format!("<built-in {DEMO_NAME} timeline>"), DEMO.to_string())
    } else {
        let name = args.timeline.display().to_string();
        let text = std::fs::read_to_string(&args.timeline)
            .map_err(|source| TimelineError::Read { file: name.clone(), source })?;
        (name, text)
    };
    let timeline = file::parse(&name, &text)?;
    let catalog = match &args.catalog {
        Some(path) => Catalog::Fixed(Arc::new(catalog_file::read(path, &args.region)?)),
        None => {
            if !known_regions().contains(&args.region) {
                return Err(CatalogError::UnknownRegion {
                    region: args.region.clone(),
                    known: known_regions(),
                }
                .into());
            }
            Catalog::Azure
        }
    };
    let run = engine::run(&timeline, &args.region, catalog, Options::default())?;
    if let Some(path) = &args.report {
        std::fs::write(path, html::render(&run, &name))
            .map_err(|source| TimelineError::Report { file: path.display().to_string(), source })?;
    }
    Ok(match args.output {
        OutputFormat::Json => serde_json::to_string_pretty(&output::to_json(&run)).expect("JSON serialises"),
        OutputFormat::Table => output::to_table(&run),
    })
}
