//! Column generation over node patterns (the configuration LP of cutting-stock problems).
//!
//! The master LP buys node *patterns* — a template with a count of pods per class — so that every
//! class gets its pods: `min Σ price(p)·z(p)` s.t. `Σ count(p, c)·z(p) ≥ n(c)`. Its dual prices say
//! what a pod of each class is worth; a pricing step fills every template greedily by that worth per
//! unit of size and adds the patterns that are worth more than they cost. When none is left the LP
//! optimum is the cheapest fractional mix of patterns, and taking ⌊z(p)⌋ copies of each leaves only
//! a small remainder for the greedy packer. This is what lets large batches land within a few percent
//! of the lower bound: the greedy alone tends to exhaust the complementary classes (CPU-heavy next to
//! memory-heavy) early and strand the rest on poorly matched nodes.

use crate::scheduling::knapsack::{integer_knapsack, knapsack_bound, knapsack_items};
use crate::scheduling::lp::CoveringLp;
use crate::scheduling::pack::{PackClasses, Pattern};
use crate::scheduling::shapes::Rule;
use crate::scheduling::valuation;
use crate::scheduling::working::Solver;

/// Column generation is skipped above this many classes (the master LP's tableau grows with them);
/// the greedy packer handles such batches alone.
const MAX_CLASSES: usize = 64;
/// Pricing rounds at most.
const MAX_ROUNDS: usize = 40;
/// New columns per round at most.
const COLUMNS_PER_ROUND: usize = 24;

/// The classes column generation works on: those with pods to place and a template, without
/// hostname pod affinity (whose patterns depend on where the group started).
fn eligible_classes(solver: &Solver, order: &[usize], counts: &[u64]) -> Vec<usize> {
    order
        .iter()
        .copied()
        .filter(|&c| counts[c] > 0)
        .filter(|&c| !solver.classes()[c].traits.rules.iter().any(|r| matches!(r, Rule::Affinity { .. })))
        .filter(|&c| solver.classes()[c].masks.iter().any(|m| *m != 0))
        .collect()
}

/// The generated columns, the master LP's last solution and the class worths (its duals).
struct Generated {
    columns: Vec<Pattern>,
    amounts: Vec<f64>,
    worth: Vec<f64>,
}

/// Runs column generation for `classes` with `demand` pods each over `templates`.
fn generate(solver: &Solver, classes: &[usize], templates: &[usize], demand: &[u64]) -> Option<Generated> {
    let mut worth: Vec<f64> = vec![0.0; solver.classes().len()];
    let bound = valuation::bound_for(solver, classes, demand);
    for (k, &c) in classes.iter().enumerate() {
        worth[c] = bound.values[k].max(1e-9);
    }
    let mut columns: Vec<Pattern> = vec![];
    // Start from the best homogeneous pattern of each class, so the master LP is feasible.
    for &c in classes {
        let best = solver.with_packer(&worth, vec![0.0; solver.dims().len()], |packer| {
            templates
                .iter()
                .filter(|&&t| packer.classes.masks(c)[t] != 0)
                .filter_map(|&t| packer.fill_greedy(t, c, &[c], demand))
                .max_by(|a, b| {
                    a.efficiency().total_cmp(&b.efficiency()).then_with(|| b.template.cmp(&a.template))
                })
        });
        columns.push(best?);
    }
    let mut amounts = vec![];
    for _ in 0..MAX_ROUNDS {
        let lp = CoveringLp {
            demand: classes.iter().map(|&c| demand[c] as f64).collect(),
            columns: columns.iter().map(|p| (p.price, column_counts(p, classes))).collect(),
        };
        let solution = lp.solve_primal()?;
        for (k, &c) in classes.iter().enumerate() {
            worth[c] = solution.duals[k];
        }
        amounts = solution.amounts;
        let mut fresh = price_columns(solver, classes, templates, &worth, demand);
        fresh.retain(|p| !columns.iter().any(|q| q.template == p.template && q.counts == p.counts));
        if fresh.is_empty() {
            break;
        }
        columns.extend(fresh);
    }
    amounts.resize(columns.len(), 0.0);
    Some(Generated { columns, amounts, worth })
}

fn column_counts(p: &Pattern, classes: &[usize]) -> Vec<f64> {
    let mut a = vec![0.0; classes.len()];
    for &(c, n) in &p.counts {
        if let Some(k) = classes.iter().position(|&x| x == c) {
            a[k] = n as f64;
        }
    }
    a
}

/// Whole copies of LP patterns to open, `(pattern, copies)`, leaving the remainder to the greedy (or
/// to another round of column generation on what remains).
pub(crate) fn plan(solver: &Solver, order: &[usize], remaining: &[u64]) -> Vec<(Pattern, u64)> {
    // A large batch is left to the greedy packer: stop counting at the first class too many.
    let mut classes: Vec<usize> = vec![];
    for c in eligible_classes(solver, order, remaining) {
        if solver.may_open(c) {
            if classes.len() == MAX_CLASSES {
                return vec![];
            }
            classes.push(c);
        }
    }
    if classes.is_empty() {
        return vec![];
    }
    let mut templates: Vec<usize> = classes.iter().flat_map(|&c| solver.candidates(c)).collect();
    templates.sort_unstable();
    templates.dedup();
    let mut demand = vec![0u64; solver.classes().len()];
    for &c in &classes {
        demand[c] = remaining[c];
    }
    let Some(generated) = generate(solver, &classes, &templates, &demand) else { return vec![] };
    // Whole copies of each pattern, largest amounts first, never more pods than remain.
    let mut left = demand;
    let mut ranked: Vec<(usize, f64)> =
        generated.amounts.iter().copied().enumerate().filter(|(_, z)| *z >= 1.0).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = vec![];
    for (j, z) in ranked {
        let p = &generated.columns[j];
        let possible = p.counts.iter().map(|&(c, n)| left[c] / n.max(1)).min().unwrap_or(0);
        let copies = (z.floor() as u64).min(possible);
        if copies == 0 {
            continue;
        }
        for &(c, n) in &p.counts {
            left[c] -= n * copies;
        }
        out.push((p.clone(), copies));
    }
    // Diving: when nothing is whole, commit to the pattern the LP wants most (at least half a node)
    // and let the caller solve the rest again.
    if out.is_empty() {
        let best = generated
            .amounts
            .iter()
            .enumerate()
            .filter(|(_, z)| **z >= 0.5)
            .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(&a.0)));
        if let Some((j, _)) = best {
            let p = &generated.columns[j];
            if p.counts.iter().all(|&(c, n)| left[c] >= n) {
                out.push((p.clone(), 1));
            }
        }
    }
    out
}

/// A lower bound from the configuration LP's duals, certified: the worth of the best possible node
/// of every template (and every existing node) is bounded from above by the LP relaxation of its
/// knapsack, the worths are scaled until no template's best node is worth more than it costs, and
/// weak duality then bounds any plan placing `counts` pods of each class. `None` when column
/// generation does not apply.
pub(crate) fn certified_bound(solver: &Solver, counts: &[u64]) -> Option<f64> {
    let all: Vec<usize> = (0..solver.classes().len()).collect();
    let classes = eligible_classes(solver, &all, counts);
    let total: u64 = counts.iter().sum();
    let covered: u64 = classes.iter().map(|&c| counts[c]).sum();
    if classes.is_empty() || classes.len() > MAX_CLASSES || covered < total {
        return None;
    }
    let templates: Vec<usize> = (0..solver.templates().len())
        .filter(|&t| classes.iter().any(|&c| solver.classes()[c].masks[t] != 0))
        .collect();
    let generated = generate(solver, &classes, &templates, counts)?;
    let worth = &generated.worth.clone();
    // Which classes may share a node at all (requirements that intersect), for the exact search.
    let mut pairs = std::collections::BTreeSet::new();
    for (i, &a) in classes.iter().enumerate() {
        for &b in &classes[i + 1..] {
            if solver.pair_ok(a, b) {
                pairs.insert((a, b));
            }
        }
    }
    let compatible = |a: usize, b: usize| a == b || pairs.contains(&(a.min(b), a.max(b)));
    let mut scale = f64::INFINITY;
    for &t in &templates {
        let tpl = &solver.templates()[t];
        let price = tpl.price(tpl.full_mask());
        let items =
            knapsack_items(solver, &classes, counts, &tpl.capacity, |c| solver.classes()[c].masks[t] != 0);
        let mut upper = knapsack_bound(solver, &tpl.capacity, &items, worth).0;
        // The LP relaxation counts fractions of pods, which matters on small nodes; where it is the
        // binding template, search the integer patterns exactly (a bounded search; the LP value
        // stands when the search runs out of budget).
        if upper > price {
            let masks: Vec<u32> = items.iter().map(|(c, _)| solver.classes()[*c].masks[t]).collect();
            if let Some(exact) = integer_knapsack(solver, &tpl.capacity, &items, &masks, worth, &compatible) {
                upper = upper.min(exact);
            }
        }
        if upper > 0.0 {
            scale = scale.min(price / upper);
        }
    }
    if !scale.is_finite() {
        return None;
    }
    let mut existing_worth = 0.0;
    for slot in solver.slots().iter().filter(|s| s.existing().is_some()) {
        let node = &solver.input().nodes[slot.existing().expect("filtered")];
        let mut free = slot.state().free.clone();
        for &(c, n) in slot.classes() {
            for (x, d) in free.iter_mut().zip(&solver.classes()[c].traits.demand) {
                *x += d * n as i64;
            }
        }
        let items = knapsack_items(solver, &classes, counts, &free, |c| {
            solver.classes()[c].requirements.matches(&node.labels)
        });
        existing_worth += knapsack_bound(solver, &free, &items, worth).0;
    }
    let demand_worth: f64 = classes.iter().map(|&c| counts[c] as f64 * worth[c]).sum();
    Some((scale * (demand_worth - existing_worth)).max(0.0))
}

/// A template to price: the LP's rounded-down pattern and the top-up order.
type PricingPlan = (usize, Vec<(usize, u64)>, Vec<usize>);

/// Patterns whose worth at the current duals exceeds their price, best first: for each template
/// whose knapsack bound says a better node may exist, the LP's fractional pattern rounded down and
/// topped up greedily by worth per unit of the scarcest resource.
fn price_columns(
    solver: &Solver,
    classes: &[usize],
    templates: &[usize],
    worth: &[f64],
    demand: &[u64],
) -> Vec<Pattern> {
    let mut plans: Vec<PricingPlan> = vec![];
    for &t in templates {
        let tpl = &solver.templates()[t];
        let price = tpl.price(tpl.full_mask());
        let items =
            knapsack_items(solver, classes, demand, &tpl.capacity, |c| solver.classes()[c].masks[t] != 0);
        // Cheap screen: with one resource alone, no node can be worth more than this.
        let screen = (0..tpl.capacity.len())
            .filter(|&r| {
                tpl.capacity[r] > 0 && items.iter().all(|(c, _)| solver.classes()[*c].traits.demand[r] > 0)
            })
            .map(|r| {
                let best = items
                    .iter()
                    .map(|(c, _)| worth[*c] / solver.classes()[*c].traits.demand[r] as f64)
                    .fold(0.0, f64::max);
                best * tpl.capacity[r] as f64
            })
            .fold(items.iter().map(|(c, most)| worth[*c] * most).sum::<f64>(), f64::min);
        if screen <= price * (1.0 + 1e-9) {
            continue;
        }
        let (upper, fractional) = knapsack_bound(solver, &tpl.capacity, &items, worth);
        if upper <= price * (1.0 + 1e-9) {
            continue;
        }
        let mut planned: Vec<(usize, u64, f64)> = items
            .iter()
            .zip(&fractional)
            .map(|((c, _), k)| (*c, k.floor() as u64, *k))
            .filter(|x| x.1 > 0)
            .collect();
        planned.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let density = |c: usize| {
            let size = tpl.dominant_share(&solver.classes()[c].traits.demand);
            if size > 0.0 {
                worth[c] / size
            } else {
                0.0
            }
        };
        let mut order: Vec<usize> = items.iter().map(|(c, _)| *c).collect();
        order.sort_by(|&a, &b| density(b).total_cmp(&density(a)).then_with(|| a.cmp(&b)));
        plans.push((t, planned.into_iter().map(|(c, n, _)| (c, n)).collect(), order));
    }
    let mut found: Vec<(f64, Pattern)> =
        solver.with_packer(worth, vec![0.0; solver.dims().len()], |packer| {
            plans
                .iter()
                .filter_map(|(t, planned, order)| packer.fill_planned(*t, planned, order, demand))
                .filter(|p| p.value > p.price * (1.0 + 1e-9))
                .map(|p| ((p.value - p.price) / p.price.max(1e-12), p))
                .collect()
        });
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.template.cmp(&b.1.template)));
    found.into_iter().take(COLUMNS_PER_ROUND).map(|(_, p)| p).collect()
}
