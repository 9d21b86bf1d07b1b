//! What one node of a template can be worth: for column generation's pricing and for certifying its
//! lower bound. The knapsack LP (solved through its covering dual, so any feasible dual is a valid
//! upper bound) and an exact, budgeted branch and bound over integer pod counts.

use crate::scheduling::lp::CoveringLp;
use crate::scheduling::templates::dominant_share;
use crate::scheduling::working::Solver;

/// `(class, most pods of it one node of this capacity can hold)` for the classes `usable` allows.
pub(crate) fn knapsack_items(
    solver: &Solver,
    classes: &[usize],
    counts: &[u64],
    capacity: &[i64],
    usable: impl Fn(usize) -> bool,
) -> Vec<(usize, f64)> {
    classes
        .iter()
        .copied()
        .filter(|&c| usable(c))
        .map(|c| {
            let class = &solver.classes()[c];
            let fit = crate::scheduling::shapes::copies_that_fit(&class.traits.demand, capacity);
            let most = fit.min(counts[c]).min(class.per_node_limit.unwrap_or(u64::MAX));
            (c, most as f64)
        })
        .filter(|(_, most)| *most > 0.0)
        .collect()
}

/// An upper bound on `Σ worth·k` over node patterns with `k ≤ most` and `Σ k·demand ≤ capacity`,
/// from a feasible solution of the knapsack LP's dual (valid whatever the simplex's rounding), and
/// the LP's fractional pattern per item.
pub(crate) fn knapsack_bound(
    solver: &Solver,
    capacity: &[i64],
    items: &[(usize, f64)],
    worth: &[f64],
) -> (f64, Vec<f64>) {
    let rows: Vec<usize> = (0..items.len()).filter(|&i| worth[items[i].0] > 0.0).collect();
    if rows.is_empty() {
        return (0.0, vec![0.0; items.len()]);
    }
    // Dual: min Σ λ'_r + Σ most·μ  s.t.  Σ_r (demand_r / cap_r)·λ'_r + μ_i ≥ worth_i — a covering LP
    // in resources normalised by the node's capacity (λ'_r = cap_r·λ_r), which keeps it well scaled.
    let dims: Vec<usize> = (0..capacity.len()).filter(|&r| capacity[r] > 0).collect();
    let share =
        |i: usize, r: usize| solver.classes()[items[i].0].traits.demand[r] as f64 / capacity[r] as f64;
    let mut columns: Vec<(f64, Vec<f64>)> =
        dims.iter().map(|&r| (1.0, rows.iter().map(|&i| share(i, r)).collect())).collect();
    for (k, &i) in rows.iter().enumerate() {
        let mut a = vec![0.0; rows.len()];
        a[k] = 1.0;
        columns.push((items[i].1, a));
    }
    let demand: Vec<f64> = rows.iter().map(|&i| worth[items[i].0]).collect();
    let solution = CoveringLp { demand, columns }.solve_primal();
    let lambda: Vec<f64> = match &solution {
        Some(s) => s.amounts[..dims.len()].to_vec(),
        None => vec![0.0; dims.len()],
    };
    let mut upper: f64 = lambda.iter().sum();
    for &i in &rows {
        let covered: f64 = dims.iter().zip(&lambda).map(|(&r, l)| share(i, r) * l).sum();
        upper += items[i].1 * (worth[items[i].0] - covered).max(0.0);
    }
    let mut pattern = vec![0.0; items.len()];
    if let Some(s) = &solution {
        for (k, &i) in rows.iter().enumerate() {
            pattern[i] = s.duals[k].clamp(0.0, items[i].1);
        }
    }
    (upper, pattern)
}

/// Search nodes the exact knapsack may visit before giving up.
const KNAPSACK_BUDGET: usize = 200_000;

/// The exact best worth of one node (integer pod counts, capacity in every resource, per-class
/// caps), by depth-first branch and bound; `None` when the search exceeds its budget. Pairwise
/// incompatibilities between classes are ignored, which can only overstate the worth — the safe
/// direction for a bound.
pub(crate) fn integer_knapsack(
    solver: &Solver,
    capacity: &[i64],
    items: &[(usize, f64)],
    masks: &[u32],
    worth: &[f64],
    compatible: &dyn Fn(usize, usize) -> bool,
) -> Option<f64> {
    struct Item<'a> {
        class: usize,
        demand: &'a [i64],
        worth: f64,
        most: u64,
        mask: u32,
    }
    let mut list: Vec<Item> = items
        .iter()
        .zip(masks)
        .filter(|((c, _), _)| worth[*c] > 0.0)
        .map(|(&(c, most), &mask)| Item {
            class: c,
            demand: &solver.classes()[c].traits.demand,
            worth: worth[c],
            most: most as u64,
            mask,
        })
        .collect();
    // Densest first (worth per unit of the scarcest resource), so good solutions come early.
    let size = |d: &[i64]| dominant_share(d, capacity);
    list.sort_by(|a, b| {
        (b.worth / size(b.demand).max(1e-12)).total_cmp(&(a.worth / size(a.demand).max(1e-12)))
    });
    // An optimistic bound on what items i.. can add within `free`: every resource limits it.
    fn optimistic(list: &[Item], i: usize, free: &[i64]) -> f64 {
        let mut best = list[i..].iter().map(|it| it.worth * it.most as f64).sum::<f64>();
        for (r, f) in free.iter().enumerate() {
            let density = list[i..]
                .iter()
                .filter(|it| it.most > 0)
                .map(|it| if it.demand[r] > 0 { it.worth / it.demand[r] as f64 } else { f64::INFINITY })
                .fold(0.0, f64::max);
            if density.is_finite() {
                best = best.min(density * (*f).max(0) as f64);
            }
        }
        best
    }
    struct Search<'a, 'b> {
        list: &'b [Item<'a>],
        compatible: &'b dyn Fn(usize, usize) -> bool,
        chosen: Vec<usize>,
        best: f64,
        visits: usize,
    }
    impl Search<'_, '_> {
        /// Explores items `i..`; false when the budget ran out.
        fn run(&mut self, i: usize, free: &mut Vec<i64>, mask: u32, value: f64) -> bool {
            self.visits += 1;
            if self.visits > KNAPSACK_BUDGET {
                return false;
            }
            if i == self.list.len() {
                self.best = self.best.max(value);
                return true;
            }
            if value + optimistic(self.list, i, free) <= self.best {
                return true;
            }
            let item = &self.list[i];
            let joins =
                item.mask & mask != 0 && self.chosen.iter().all(|&j| (self.compatible)(j, item.class));
            let fit = if joins {
                crate::scheduling::shapes::copies_that_fit(item.demand, free).min(item.most)
            } else {
                0
            };
            for k in (0..=fit).rev() {
                for (f, d) in free.iter_mut().zip(item.demand) {
                    *f -= d * k as i64;
                }
                if k > 0 {
                    self.chosen.push(item.class);
                }
                let next_mask = if k > 0 { mask & item.mask } else { mask };
                let ok = self.run(i + 1, free, next_mask, value + k as f64 * item.worth);
                if k > 0 {
                    self.chosen.pop();
                }
                for (f, d) in free.iter_mut().zip(item.demand) {
                    *f += d * k as i64;
                }
                if !ok {
                    return false;
                }
            }
            true
        }
    }
    let mut search = Search { list: &list, compatible, chosen: vec![], best: 0.0, visits: 0 };
    let mut free = capacity.to_vec();
    // A hair of slack so that float sums of equal worths cannot undercut the true optimum.
    search.run(0, &mut free, u32::MAX, 0.0).then_some(search.best * (1.0 + 1e-12))
}
