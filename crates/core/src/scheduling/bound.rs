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
//! spread, host ports), buy at least `⌈n/k⌉` nodes that class can use, less the existing nodes. The
//! same row is written for a *group* of classes that share one such rule (a hostname anti-affinity or
//! spread over a selector that selects them all): at most `k` of the group's pods share a node, `k` the
//! largest limit among the members, so its `n` pods need `⌈n/k⌉` nodes any member can use. A group of
//! differently sized pods is split into many classes, whose own rows say little (1,000 pods under one
//! anti-affinity need 1,000 nodes; each size's class alone needs only its own count).
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

/// Classes (indices into the bound's classes) that count together against one per-node limit.
pub struct NodeCountGroup {
    pub members: Vec<usize>,
    /// At most this many of the members' pods, together, share a node.
    pub per_node: u64,
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
    node_count_groups: &[NodeCountGroup],
    templates: &[Template],
    free_existing: &[i64],
    existing_nodes: u64,
) -> Bound {
    let dims = free_existing.len();
    let mut bound =
        Bound { per_hour: 0.0, values: vec![0.0; classes.len()], resource_prices: vec![0.0; dims] };
    let components = components(classes, templates.len());
    let mut component_of = vec![0; classes.len()];
    for (i, component) in components.iter().enumerate() {
        for &c in component {
            component_of[c] = i;
        }
    }
    for (i, component) in components.iter().enumerate() {
        // The templates any class of the component uses, ascending (marked rather than collected
        // and sorted: a large batch has thousands of classes naming hundreds of templates each).
        let mut used = vec![false; templates.len()];
        for &c in component {
            for &t in &classes[c].templates {
                used[t] = true;
            }
        }
        let columns: Vec<usize> = (0..templates.len()).filter(|&t| used[t]).collect();
        if columns.is_empty() {
            continue;
        }
        // Node-count rows: one per limited class, then one per group of two or more classes of this
        // component (a group's members in other components share no template with these, so the
        // part of it here is a group of its own; splitting only weakens the row).
        let mut limited: Vec<(Vec<usize>, u64)> =
            component.iter().filter_map(|&c| classes[c].per_node.map(|k| (vec![c], k.max(1)))).collect();
        for group in node_count_groups {
            let members: Vec<usize> =
                group.members.iter().copied().filter(|&c| component_of[c] == i).collect();
            if members.len() > 1 {
                limited.push((members, group.per_node.max(1)));
            }
        }
        let groups = demand_groups(classes, component, templates.len());
        // Rows: per group (a template set and the classes confined to it) and resource, then the
        // node-count rows.
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
        // Which limited rows each template counts toward, gathered once rather than searched per column.
        let mut limited_rows_of: Vec<Vec<usize>> = vec![vec![]; templates.len()];
        for (k, (members, per_node)) in limited.iter().enumerate() {
            let pods: u64 = members.iter().map(|&c| classes[c].count).sum();
            demand[base + k] = pods.div_ceil(*per_node).saturating_sub(existing_nodes) as f64;
            for &t in members.iter().flat_map(|&c| &classes[c].templates) {
                if limited_rows_of[t].last() != Some(&(base + k)) {
                    limited_rows_of[t].push(base + k);
                }
            }
        }
        let lp_columns = columns
            .iter()
            .map(|&t| {
                let tpl = &templates[t];
                let mut a = vec![0.0; rows];
                for (g, group) in groups.iter().enumerate() {
                    if group.templates.contains(t) {
                        for (r, v) in tpl.capacity.iter().enumerate() {
                            a[g * dims + r] = (*v).max(0) as f64;
                        }
                    }
                }
                for &row in &limited_rows_of[t] {
                    a[row] = 1.0;
                }
                (tpl.price(tpl.full_mask()), a)
            })
            .collect();
        let result = CoveringLp { demand, columns: lp_columns }.solve();
        bound.per_hour += result.lower_bound;
        for (g, group) in groups.iter().enumerate() {
            let y = &result.duals[g * dims..(g + 1) * dims];
            for &c in &group.members {
                bound.values[c] += classes[c].demand.iter().zip(y).map(|(d, y)| *d as f64 * y).sum::<f64>();
            }
        }
        for (k, (members, per_node)) in limited.iter().enumerate() {
            for &c in members {
                bound.values[c] += result.duals[base + k] / *per_node as f64;
            }
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
    templates: TemplateSet,
    members: Vec<usize>,
}

/// A set of template indices as a bit set: groups are tested against every class's templates.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TemplateSet(Vec<u64>);

impl TemplateSet {
    fn of(templates: &[usize], universe: usize) -> Self {
        let mut bits = vec![0u64; universe.div_ceil(64)];
        for &t in templates {
            bits[t / 64] |= 1 << (t % 64);
        }
        TemplateSet(bits)
    }

    fn contains(&self, t: usize) -> bool {
        self.0[t / 64] & (1 << (t % 64)) != 0
    }

    fn is_subset_of(&self, other: &TemplateSet) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| a & !b == 0)
    }
}

/// One group per distinct template set in the component (the most restrictive first, capped), plus
/// the whole component. A class belongs to every group whose templates include all of its own.
fn demand_groups(classes: &[BoundClass], component: &[usize], universe: usize) -> Vec<DemandGroup> {
    let own: Vec<TemplateSet> =
        component.iter().map(|&c| TemplateSet::of(&classes[c].templates, universe)).collect();
    let mut union = TemplateSet(vec![0; universe.div_ceil(64)]);
    for set in &own {
        for (u, b) in union.0.iter_mut().zip(&set.0) {
            *u |= b;
        }
    }
    // Distinct sets, smallest first (ties by the sorted template list, as before bit sets).
    let mut sets: Vec<(usize, &Vec<usize>, usize)> = component
        .iter()
        .enumerate()
        .map(|(i, &c)| (classes[c].templates.len(), &classes[c].templates, i))
        .collect();
    sets.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    sets.dedup_by(|a, b| a.1 == b.1);
    let mut chosen: Vec<TemplateSet> =
        sets.into_iter().filter(|s| own[s.2] != union).take(MAX_GROUPS).map(|s| own[s.2].clone()).collect();
    chosen.push(union);
    chosen
        .into_iter()
        .map(|templates| {
            let members = component
                .iter()
                .zip(&own)
                .filter(|(_, set)| set.is_subset_of(&templates))
                .map(|(&c, _)| c)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn class(templates: &[usize]) -> BoundClass<'static> {
        BoundClass { demand: &[1], count: 1, templates: templates.to_vec(), per_node: None }
    }

    #[test]
    fn a_class_counts_in_every_group_whose_templates_hold_all_of_its_own() {
        // Templates past 64 exercise the second word of the sets.
        let classes = [class(&[1, 70]), class(&[1]), class(&[2, 70]), class(&[1, 2, 70])];
        let groups = demand_groups(&classes, &[0, 1, 2, 3], 100);
        let members: Vec<Vec<usize>> = groups.iter().map(|g| g.members.clone()).collect();
        // Smallest sets first ([1], then [1, 70] before [2, 70]), the union last.
        assert_eq!(members, [vec![1], vec![0, 1], vec![2], vec![0, 1, 2, 3]]);
        assert!(groups[3].templates.contains(70) && !groups[3].templates.contains(3));
    }
}
