//! The resource lower bound on the $/hour of new capacity, and the per-pod values packing uses.
//! A second bound, from the configuration LP's duals, lives in [`crate::scheduling::colgen`]; it is
//! usually tighter (it knows pods are whole), and the plan reports the larger of the two.
//!
//! # Why it is a bound
//! Take any feasible plan that places the same pods. Relax it three ways, each of which can only
//! lower its cost: (1) pods become divisible, so a node only has to provide enough of each resource
//! in total; (2) all free capacity on existing nodes may serve any pod; (3) each new node costs its
//! type's cheapest available offering. What remains is a covering LP per *component* — classes of
//! pods linked by sharing at least one template (NodePool × instance type): buy nodes (fractionally)
//! so that, per resource, capacity after DaemonSets covers the demand minus existing free capacity;
//! and for a class that may hold at most `k` of its pods on one node (hostname anti-affinity, hostname
//! spread, host ports), buy at least `⌈n/k⌉` nodes that class can use, less the existing nodes.
//! Components share no template, so no node of any plan serves two components and their optima add
//! up. Within a component the resource rows are repeated per *template set*: the classes that can
//! only use templates of a set must have their demand covered by nodes of that set (a 2-CPU pod
//! cannot use the capacity of a 1.9-CPU node, however cheap), which keeps the relaxation from
//! counting small cheap nodes that no pod of the set fits on. Each LP is solved by [`crate::scheduling::lp`], which certifies its result through a
//! dual-feasible solution (weak duality), so rounding inside the simplex cannot overstate the bound.

use crate::scheduling::lp::CoveringLp;
use crate::scheduling::templates::Template;

/// One class as the bound sees it.
pub struct BoundClass<'a> {
    pub demand: &'a [i64],
    pub count: u64,
    /// Templates the class may use (`mask != 0`).
    pub templates: Vec<usize>,
    /// At most this many pods of the class fit on one node because of per-node rules.
    pub per_node: Option<u64>,
}

/// The bound and the pricing it implies.
#[derive(Clone, Debug, Default)]
pub struct Bound {
    pub per_hour: f64,
    /// Value of one pod of each class at the dual prices.
    pub values: Vec<f64>,
    /// Dual price of each resource dimension (the largest over components, for efficiency caps).
    pub resource_prices: Vec<f64>,
}

/// Computes the bound for `classes` given the free capacity and number of existing nodes.
pub fn compute(
    classes: &[BoundClass],
    templates: &[Template],
    free_existing: &[i64],
    existing_nodes: u64,
) -> Bound {
    let dims = free_existing.len();
    let mut bound =
        Bound { per_hour: 0.0, values: vec![0.0; classes.len()], resource_prices: vec![0.0; dims] };
    for component in components(classes, templates.len()) {
        let mut columns: Vec<usize> =
            component.iter().flat_map(|&c| classes[c].templates.iter().copied()).collect();
        columns.sort_unstable();
        columns.dedup();
        if columns.is_empty() {
            continue;
        }
        let limited: Vec<usize> =
            component.iter().copied().filter(|&c| classes[c].per_node.is_some()).collect();
        let groups = demand_groups(classes, &component);
        // Rows: per group (a template set and the classes confined to it) and resource, then one
        // node-count row per per-node-limited class.
        let base = groups.len() * dims;
        let rows = base + limited.len();
        let mut demand = vec![0.0; rows];
        for (g, group) in groups.iter().enumerate() {
            for &c in &group.members {
                for (r, d) in classes[c].demand.iter().enumerate() {
                    demand[g * dims + r] += (*d as f64) * classes[c].count as f64;
                }
            }
            for (row, free) in demand[g * dims..(g + 1) * dims].iter_mut().zip(free_existing) {
                *row = (*row - (*free).max(0) as f64).max(0.0);
            }
        }
        for (k, &c) in limited.iter().enumerate() {
            let per_node = classes[c].per_node.unwrap_or(1).max(1);
            let nodes = classes[c].count.div_ceil(per_node);
            demand[base + k] = nodes.saturating_sub(existing_nodes) as f64;
        }
        let lp_columns = columns
            .iter()
            .map(|&t| {
                let tpl = &templates[t];
                let mut a = vec![0.0; rows];
                for (g, group) in groups.iter().enumerate() {
                    if group.templates.binary_search(&t).is_ok() {
                        for (r, v) in tpl.capacity.iter().enumerate() {
                            a[g * dims + r] = (*v).max(0) as f64;
                        }
                    }
                }
                for (k, &c) in limited.iter().enumerate() {
                    if classes[c].templates.binary_search(&t).is_ok() {
                        a[base + k] = 1.0;
                    }
                }
                (tpl.price(tpl.full_mask()), a)
            })
            .collect();
        let result = CoveringLp { demand, columns: lp_columns }.solve();
        bound.per_hour += result.lower_bound;
        for &c in &component {
            let mut v = 0.0;
            for (g, group) in groups.iter().enumerate() {
                if group.members.contains(&c) {
                    let y = &result.duals[g * dims..(g + 1) * dims];
                    v += classes[c].demand.iter().zip(y).map(|(d, y)| *d as f64 * y).sum::<f64>();
                }
            }
            if let Some(k) = limited.iter().position(|&x| x == c) {
                v += result.duals[base + k] / classes[c].per_node.unwrap_or(1).max(1) as f64;
            }
            bound.values[c] = v;
        }
        // A unit of a resource on a node is worth at most the sum of its prices over the groups.
        for r in 0..dims {
            let price: f64 = (0..groups.len()).map(|g| result.duals[g * dims + r]).sum();
            bound.resource_prices[r] = bound.resource_prices[r].max(price);
        }
    }
    bound
}

/// Most template-set rows per component; dropping rows only weakens the bound, never breaks it.
const MAX_GROUPS: usize = 24;

/// A set of templates and the classes that can use nothing outside it.
struct DemandGroup {
    templates: Vec<usize>,
    members: Vec<usize>,
}

/// One group per distinct template set in the component (the most restrictive first, capped), plus
/// the whole component. A class belongs to every group whose templates include all of its own.
fn demand_groups(classes: &[BoundClass], component: &[usize]) -> Vec<DemandGroup> {
    let mut union: Vec<usize> =
        component.iter().flat_map(|&c| classes[c].templates.iter().copied()).collect();
    union.sort_unstable();
    union.dedup();
    let mut sets: Vec<&Vec<usize>> = component.iter().map(|&c| &classes[c].templates).collect();
    sets.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    sets.dedup();
    let mut chosen: Vec<Vec<usize>> =
        sets.into_iter().filter(|s| s.len() < union.len()).take(MAX_GROUPS).cloned().collect();
    chosen.push(union);
    chosen
        .into_iter()
        .map(|templates| {
            let members = component
                .iter()
                .copied()
                .filter(|&c| classes[c].templates.iter().all(|t| templates.binary_search(t).is_ok()))
                .collect();
            DemandGroup { templates, members }
        })
        .collect()
}

/// Classes grouped by shared templates (union-find over the templates they use).
fn components(classes: &[BoundClass], templates: usize) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..classes.len()).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while parent[r] != r {
            r = parent[r];
        }
        let mut y = x;
        while parent[y] != r {
            let next = parent[y];
            parent[y] = r;
            y = next;
        }
        r
    }
    let mut owner: Vec<Option<usize>> = vec![None; templates];
    for (c, class) in classes.iter().enumerate() {
        for &t in &class.templates {
            match owner[t] {
                None => owner[t] = Some(c),
                Some(o) => {
                    let (a, b) = (find(&mut parent, o), find(&mut parent, c));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
            }
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for c in 0..classes.len() {
        let root = find(&mut parent, c);
        groups.entry(root).or_default().push(c);
    }
    groups.into_values().collect()
}
