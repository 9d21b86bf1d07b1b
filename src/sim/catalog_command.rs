//! The `karpenter-azure catalog` command: the sizes a NodePool allows in a region, with allocatable
//! resources and prices, cheapest first. Reads the NodePool, AKSNodeClass and NodeOverlay files; the
//! selection itself is the pure [`crate::model::selection`], the overlays the pure
//! [`crate::scheduling::overlay`] (applied before the selection, as the controller applies them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::apis::manifest::{self, ManifestError};
use crate::apis::validate::{self, ValidationError};
use crate::apis::{AKSNodeClass, NodeOverlay, NodePool};
use crate::catalog::cli::{render, OutputFormat};
use crate::catalog::instancetype::{instance_types, known_regions, CatalogError};
use crate::catalog::pricing::PriceTable;
use crate::catalog::regions::offline_notes;
use crate::catalog::support::SizeRules;
use crate::catalog::unavailable::UnavailableOfferings;
use crate::catalog::{embedded_sku, embedded_skus, CapacityOptions};
use crate::model::requirements::{MinValuesError, RequirementError};
use crate::model::selection;
use crate::model::InstanceType;
use crate::scheduling::overlay::{self, PoolTypes};

/// What the command was asked for.
#[derive(Debug, Clone)]
pub struct CatalogArgs {
    pub region: String,
    pub nodepool: Option<PathBuf>,
    pub nodeclass: Option<PathBuf>,
    /// Files holding NodeOverlays (other kinds in them are skipped).
    pub overlays: Vec<PathBuf>,
    /// List the sizes left out, with the reason, instead of those offered.
    pub left_out: bool,
    pub output: OutputFormat,
}

/// Why the command could not produce a listing; each message is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{file}: {object}: {error}")]
    Invalid { file: String, object: String, error: ValidationError },
    #[error("{file}: {object}: {error}")]
    Requirement { file: String, object: String, error: RequirementError },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("{file}: {object}: {error}")]
    MinValues { file: String, object: String, error: MinValuesError },
}

/// What the command prints: the listing on stdout, the warnings (one line each) on stderr so that the
/// JSON output stays parseable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub text: String,
    pub warnings: Vec<String>,
}

/// Runs the command and returns what it prints.
pub fn run(args: &CatalogArgs) -> Result<Listing, CommandError> {
    let mut options = CapacityOptions::default();
    let mut rules = SizeRules::default();
    if let Some(path) = &args.nodeclass {
        let (raw, class): (_, AKSNodeClass) = manifest::read_one(path, "AKSNodeClass")?;
        let file = path.display().to_string();
        validate::aksnodeclass(&class).map_err(|error| CommandError::Invalid {
            file,
            object: raw.display.clone(),
            error,
        })?;
        options.max_pods = class.spec.max_pods.map(|m| m as u32);
        options.os_disk_size_gb = class.spec.os_disk_size_gb.map(|g| g as u32);
        rules = SizeRules::of(&class);
    }
    if args.left_out {
        let has_own_data = known_regions().contains(&args.region);
        let pricing = PriceTable::static_or_fallback(&args.region);
        let warnings = offline_notes(&args.region, has_own_data, &pricing);
        return Ok(Listing { text: render_left_out(&left_out(&rules), args.output), warnings });
    }
    let pricing = PriceTable::static_or_fallback(&args.region);
    let mut types =
        instance_types(&args.region, &options, &pricing, &UnavailableOfferings::default(), Duration::ZERO)?;
    types.retain(|t| embedded_sku(&t.name).is_none_or(|sku| rules.reason(sku).is_none()));
    let has_own_data = known_regions().contains(&args.region);
    let mut warnings = offline_notes(&args.region, has_own_data, &pricing);
    let pool = match &args.nodepool {
        None => None,
        Some(path) => {
            let file = path.display().to_string();
            let (raw, pool): (_, NodePool) = manifest::read_one(path, "NodePool")?;
            let object = raw.display.clone();
            validate::nodepool(&pool).map_err(|error| CommandError::Invalid {
                file: file.clone(),
                object: object.clone(),
                error,
            })?;
            Some((file, object, pool))
        }
    };
    let types = with_overlays(types, pool.as_ref().map(|(_, _, p)| p), &args.overlays, &mut warnings)?;
    let types = match pool {
        None => types,
        Some((file, object, pool)) => {
            let requirements =
                crate::apis::requirements::from_api(&pool.spec.template.spec.requirements).map_err(
                    |error| CommandError::Requirement { file: file.clone(), object: object.clone(), error },
                )?;
            selection::select(&types, &requirements).map_err(|error| CommandError::MinValues {
                file,
                object,
                error,
            })?
        }
    };
    Ok(Listing { text: render(&types, args.output), warnings })
}

/// `types` with the NodeOverlays of `files` applied for `pool` (a pool named `default` without labels
/// when none is given); overlays left out are reported in `warnings`.
fn with_overlays(
    types: Vec<InstanceType>,
    pool: Option<&NodePool>,
    files: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Result<Vec<InstanceType>, CommandError> {
    let mut overlays: Vec<NodeOverlay> = vec![];
    for path in files {
        let file = path.display().to_string();
        for raw in manifest::read_objects(path)?.iter().filter(|r| r.kind == "NodeOverlay") {
            overlays.push(raw.decode(&file)?);
        }
    }
    if overlays.is_empty() {
        return Ok(types);
    }
    let no_labels = BTreeMap::new();
    let name = pool.and_then(|p| p.metadata.name.as_deref()).unwrap_or("default");
    let labels = pool.and_then(|p| p.spec.template.metadata.as_ref()).map_or(&no_labels, |m| &m.labels);
    let mut out = overlay::apply(&[PoolTypes { name, labels, types: &types }], &overlays);
    for (overlay, why) in &out.rejected {
        warnings.push(format!("NodeOverlay/{overlay}: left out: {why}"));
    }
    Ok(out.types.remove(0))
}

/// The embedded sizes `rules` leave out, by name, with the reason.
fn left_out(rules: &SizeRules) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = embedded_skus()
        .iter()
        .filter_map(|sku| rules.reason(sku).map(|why| (sku.name.clone(), why.to_string())))
        .collect();
    out.sort();
    out
}

fn render_left_out(rows: &[(String, String)], output: OutputFormat) -> String {
    match output {
        OutputFormat::Json => {
            let list: Vec<serde_json::Value> = rows
                .iter()
                .map(|(name, reason)| serde_json::json!({"name": name, "reason": reason}))
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&list).expect("JSON of strings"))
        }
        OutputFormat::Table => {
            let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(4).max(4);
            let mut out = format!("{:<width$}  REASON\n", "NAME");
            for (name, reason) in rows {
                out.push_str(&format!("{name:<width$}  {reason}\n"));
            }
            out
        }
    }
}
