//! Reasons a person can act on, for pods the solver leaves pending: per NodePool, in weight order,
//! what stops the pods (a taint, a requirement, no instance type big enough, a limit, a topology
//! rule), for example "nodepool general: no instance type has 96Gi memory with
//! kubernetes.io/arch=arm64 in eastus-2".

use crate::model::labels::{self, LABEL_NODEPOOL, LABEL_ZONE};
use crate::model::requirements::Requirements;
use crate::model::resources::format_resource_quantity;
use crate::model::selection::{allowed_offerings, type_allowed};
use crate::scheduling::shapes::Rule;
use crate::scheduling::templates::{pool_order, pool_rejects};
use crate::scheduling::working::Solver;

/// Why the pods of class `c` could not be placed.
pub(crate) fn why_not(solver: &Solver, c: usize) -> String {
    let class = &solver.classes()[c];
    let input = solver.input();
    if input.nodepools.is_empty() {
        return "no NodePool exists, and no existing node can take the pod".to_string();
    }
    let usable: Vec<usize> =
        class.masks.iter().enumerate().filter(|(_, m)| **m != 0).map(|(t, _)| t).collect();
    if !usable.is_empty() {
        if usable.iter().all(|&t| solver.limit_copies(t) == 0) {
            let mut pools: Vec<&str> =
                usable.iter().map(|&t| input.nodepools[solver.templates()[t].pool].name.as_str()).collect();
            pools.dedup();
            return pools
                .iter()
                .map(|p| format!("nodepool {p}: limits reached, no room for another node"))
                .collect::<Vec<_>>()
                .join("; ");
        }
        if let Some(rule) = class.traits.rules.iter().find(|r| matches!(r, Rule::Affinity { .. })) {
            let _ = rule;
            return "required pod affinity on kubernetes.io/hostname: no node has a matching pod".to_string();
        }
        return "no node can take the pod together with its per-node rules (anti-affinity, spread, host ports)"
            .to_string();
    }
    let pod = &input.pods[class.pods[0]];
    let mut reasons = vec![];
    for p in pool_order(&input.nodepools) {
        let pool = &input.nodepools[p];
        let prefix = format!("nodepool {}", pool.name);
        if let Some(reason) = pool_rejects(pool, &class.requirements, &pod.tolerations) {
            reasons.push(format!("{prefix}: {reason}"));
            continue;
        }
        let joint = pool.requirements.intersect(&class.requirements);
        // Name what narrows the choice, whether the pod or the pool asked for it.
        let context = describe(&joint, &solver.input().options.region);
        let matching: Vec<_> = pool
            .instance_types
            .iter()
            .filter(|t| type_allowed(t, &joint) && allowed_offerings(t, &joint).any(|o| o.available))
            .collect();
        if matching.is_empty() {
            reasons.push(format!("{prefix}: no instance type matches{context}"));
            continue;
        }
        // Which requested resources no matching type has room for (after DaemonSets).
        let dims = solver.dims();
        let mut short = vec![];
        for (r, name) in dims.names.iter().enumerate() {
            let need = class.traits.demand[r];
            let best =
                solver.templates().iter().filter(|t| t.pool == p).map(|t| t.capacity[r]).max().unwrap_or(0);
            if need > best {
                short.push(format!("{} {name}", format_resource_quantity(name, need)));
            }
        }
        if short.is_empty() {
            reasons.push(format!("{prefix}: no instance type fits the pod's requests together{context}"));
        } else {
            reasons.push(format!("{prefix}: no instance type has {}{context}", short.join(" and ")));
        }
    }
    reasons.join("; ")
}

/// " with k=v, ... in <zone>" for the well-known requirements that narrow the choice.
fn describe(requirements: &Requirements, region: &str) -> String {
    let mut parts = vec![];
    let mut zone = None;
    for r in requirements.iter() {
        if r.key() == LABEL_NODEPOOL || !labels::is_well_known(r.key()) {
            continue;
        }
        if r.key() == LABEL_ZONE {
            zone = r.single_value().map(str::to_string);
            if zone.is_some() {
                continue;
            }
        }
        match r.single_value() {
            Some(v) => parts.push(format!("{}={v}", r.key())),
            None => parts.push(r.to_string()),
        }
    }
    let mut out = String::new();
    if !parts.is_empty() {
        out.push_str(&format!(" with {}", parts.join(", ")));
    }
    match (zone, region.is_empty()) {
        (Some(z), _) => out.push_str(&format!(" in {z}")),
        (None, false) => out.push_str(&format!(" in {region}")),
        _ => {}
    }
    out
}
