//! Rendering of instance types for the `karpenter-azure catalog` command: an aligned text table or stable
//! JSON. Pure formatting; the command itself (flags, NodeClass and NodePool filtering) lives in main.rs.

use serde_json::{json, Value};

use crate::model::labels;
use crate::model::resources::{format_resource_quantity, CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::model::{CapacityType, InstanceType};

/// Output format of the catalog command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
}

/// Column headers of the table output.
pub const TABLE_HEADERS: [&str; 9] = [
    "NAME",
    "VCPU",
    "MEMORY",
    "ALLOCATABLE CPU",
    "ALLOCATABLE MEMORY",
    "PODS",
    "ON-DEMAND $/h",
    "SPOT $/h",
    "ZONES",
];

/// Renders `types` cheapest first (on-demand price, then name).
pub fn render(types: &[InstanceType], output: OutputFormat) -> String {
    let sorted = sorted_cheapest_first(types);
    match output {
        OutputFormat::Table => render_table(&sorted),
        OutputFormat::Json => render_json(&sorted),
    }
}

fn sorted_cheapest_first(types: &[InstanceType]) -> Vec<&InstanceType> {
    let mut sorted: Vec<&InstanceType> = types.iter().collect();
    let key = |t: &InstanceType| t.price(CapacityType::OnDemand).unwrap_or(f64::INFINITY);
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)).then_with(|| a.name.cmp(&b.name)));
    sorted
}

/// One table row per instance type, cells in [`TABLE_HEADERS`] order.
pub fn table_rows(types: &[&InstanceType]) -> Vec<[String; 9]> {
    types
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.vcpus.to_string(),
                format_resource_quantity(MEMORY, (t.memory_mib as i64) << 20),
                format_resource_quantity(CPU, t.allocatable.get(CPU)),
                // Whole MiB, rounded down: readable, and never more than the node really offers.
                format!("{}Mi", t.allocatable.get(MEMORY) >> 20),
                t.allocatable.get(PODS).to_string(),
                format_price(t.price(CapacityType::OnDemand)),
                format_price(t.price(CapacityType::Spot)),
                t.available_zones().join(","),
            ]
        })
        .collect()
}

fn format_price(price: Option<f64>) -> String {
    price.map_or_else(|| "-".to_string(), |p| format!("{p:.4}"))
}

fn render_table(types: &[&InstanceType]) -> String {
    let rows = table_rows(types);
    let mut widths = TABLE_HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let headers = TABLE_HEADERS.map(str::to_string);
    for row in std::iter::once(&headers).chain(&rows) {
        let cells: Vec<String> =
            row.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn render_json(types: &[&InstanceType]) -> String {
    let entries: Vec<Value> = types.iter().map(|t| json_entry(t)).collect();
    let mut text = serde_json::to_string_pretty(&entries).unwrap_or_else(|_| "[]".to_string());
    text.push('\n');
    text
}

/// The JSON shape of one instance type (stable keys; quantities as Kubernetes strings).
pub fn json_entry(t: &InstanceType) -> Value {
    let quantities = |r: &crate::model::resources::Resources| {
        let mut q = r.to_quantities();
        // Always present, even when zero, so consumers need no defaults.
        for name in [CPU, MEMORY, PODS, EPHEMERAL_STORAGE] {
            q.entry(name.to_string()).or_insert_with(|| format_resource_quantity(name, 0));
        }
        q
    };
    json!({
        "name": t.name,
        "vcpus": t.vcpus,
        "memory_mib": t.memory_mib,
        "arch": t.labels.get(labels::LABEL_ARCH),
        "allocatable": quantities(&t.allocatable),
        "capacity": quantities(&t.capacity),
        "on_demand_price": t.price(CapacityType::OnDemand),
        "spot_price": t.price(CapacityType::Spot),
        "zones": t.available_zones(),
        "labels": t.labels,
    })
}
