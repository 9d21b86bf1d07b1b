//! The `karpenter-azure simulate` command: read a scenario (files, or the built-in demo), build the
//! solver input, time one solve and render the plan, with what the disruption decisions would do to
//! the managed nodes at `--now`. Nothing is printed until everything succeeded,
//! so bad input gives one error line and no partial output.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::catalog_file::{self, CatalogFileError};
use super::explain::{self, Explanation, Target};
use k8s_openapi::jiff::Timestamp;

use super::load::{self, LoadError, Source};
use super::managed::{self, ManagedError};
use super::report::{self, DisruptionReport, Report};
use super::scenario::{self, Catalog, Scenario, ScenarioError};
use crate::catalog::regions::offline_notes;
use crate::catalog::{known_regions, region_zones, CatalogError, OutputFormat, PriceTable};

/// The built-in demo scenario, run when no file is given.
pub const DEMO: &str = include_str!("demo.yaml");
/// The name of the demo in messages.
pub const DEMO_NAME: &str = "<built-in demo>";

/// What the command was asked for.
#[derive(Debug, Clone)]
pub struct SimulateArgs {
    pub files: Vec<PathBuf>,
    pub region: String,
    pub catalog: Option<PathBuf>,
    pub output: OutputFormat,
    /// The moment the disruption decisions are judged at (consolidateAfter, expireAfter, budget
    /// schedules against the objects' timestamps); `None` is the current time.
    pub now: Option<Timestamp>,
    /// `--explain`: objects (`pod/NS/NAME`, `node/NAME`) to explain instead of printing the report.
    pub explain: Vec<String>,
    /// Objects read elsewhere than `files` (`--from-cluster`), read after them.
    pub sources: Vec<Source>,
}

/// Why the command produced no plan; each message is one line naming the file, object and field.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    CatalogFile(#[from] CatalogFileError),
    #[error(transparent)]
    Region(#[from] CatalogError),
    #[error(transparent)]
    Managed(#[from] ManagedError),
    #[error("{0}")]
    Explain(String),
}

impl SimulateError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Load(e) => e.category(),
            Self::Scenario(e) => e.category(),
            Self::CatalogFile(e) => e.category(),
            Self::Region(e) => e.category(),
            Self::Managed(e) => e.category(),
            Self::Explain(_) => "Explain",
        }
    }
}

/// Runs the command and returns what it prints.
pub fn run(args: &SimulateArgs) -> Result<String, SimulateError> {
    let targets: Vec<Target> = args
        .explain
        .iter()
        .map(|t| Target::parse(t))
        .collect::<Result<_, _>>()
        .map_err(SimulateError::Explain)?;
    let (objects, mut scenario) = objects_and_scenario(args)?;
    let started = Instant::now();
    let plan = crate::scheduling::solve(&scenario.input);
    let solve_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut warnings = vec![];
    let snapshot = managed::snapshot(&objects, &scenario, &mut warnings)?;
    scenario.warnings.extend(warnings);
    let now = args.now.unwrap_or_else(Timestamp::now);
    let options = crate::disruption::Options::default();
    let disruption = DisruptionReport {
        decisions: crate::disruption::decide(&snapshot, now, &options),
        repack_lower_bound_per_hour: crate::disruption::repack_lower_bound(&snapshot),
        expired: crate::disruption::expired(&snapshot, now),
        static_pools: crate::disruption::static_pools::decide(
            &snapshot,
            now,
            scenario.input.options.max_instance_type_options,
        ),
        now,
    };
    let report = Report {
        input: &scenario.input,
        plan: &plan,
        solve_ms,
        warnings: &scenario.warnings,
        disruption: Some(&disruption),
    };
    if targets.is_empty() {
        return Ok(report::render(&report, args.output));
    }
    let answers: Vec<Explanation> = targets
        .iter()
        .map(|t| explain::explain(&report, t))
        .collect::<Result<_, _>>()
        .map_err(SimulateError::Explain)?;
    Ok(match args.output {
        OutputFormat::Table => answers.iter().map(|a| a.line() + "\n").collect(),
        OutputFormat::Json => {
            let json =
                serde_json::json!({"explain": answers.iter().map(Explanation::json).collect::<Vec<_>>()});
            serde_json::to_string_pretty(&json).unwrap_or_default() + "\n"
        }
    })
}

/// The scenario the command solves: its files (or the demo) read against its catalog.
pub fn scenario_of(args: &SimulateArgs) -> Result<Scenario, SimulateError> {
    Ok(objects_and_scenario(args)?.1)
}

/// The scenario's objects as read, and the scenario built from them.
pub fn objects_and_scenario(args: &SimulateArgs) -> Result<(load::Objects, Scenario), SimulateError> {
    let catalog = match &args.catalog {
        Some(path) => Catalog::Fixed(Arc::new(catalog_file::read(path, &args.region)?)),
        None => {
            // Checked up front so a scenario without NodePools still reports a mistyped region.
            region_zones(&args.region)?;
            Catalog::Azure
        }
    };
    let sources: Vec<Source> = if args.files.is_empty() && args.sources.is_empty() {
        vec![Source::Text { name: DEMO_NAME.into(), text: DEMO.into() }]
    } else {
        args.files.iter().cloned().map(Source::File).chain(args.sources.iter().cloned()).collect()
    };
    let objects = load::load(&sources)?;
    let mut scenario = scenario::build(&objects, &args.region, &catalog)?;
    scenario.warnings.extend(objects.skipped_warning());
    if let Catalog::Azure = catalog {
        let has_own_data = known_regions().contains(&args.region);
        let prices = PriceTable::static_or_fallback(&args.region);
        scenario.warnings.extend(offline_notes(&args.region, has_own_data, &prices));
    }
    Ok((objects, scenario))
}
