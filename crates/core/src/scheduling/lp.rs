//! A small dense simplex for covering LPs: minimise `c·x` subject to `A x ≥ b`, `x ≥ 0`, with few rows
//! (resource dimensions plus a handful of node-count rows) and up to a few thousand columns (instance
//! types). It returns a *certified* lower bound: the dual prices read off the final tableau are scaled
//! until every column satisfies `aₜ·y ≤ cₜ`, and by weak duality `b·y` is then a lower bound on the
//! optimum whatever rounding happened inside the simplex.
//!
//! Rows are scaled to a common magnitude first (CPU is in millicores, memory in bytes), which keeps the
//! pivots well conditioned. Bland's rule prevents cycling.

/// A covering LP: `min Σ cost[j]·x[j]` s.t. `Σ columns[j][i]·x[j] ≥ demand[i]` for every row `i`.
#[derive(Clone, Debug, Default)]
pub struct CoveringLp {
    pub demand: Vec<f64>,
    /// One entry per column: its cost and its coefficient in every row.
    pub columns: Vec<(f64, Vec<f64>)>,
}

/// The certified result.
#[derive(Clone, Debug, PartialEq)]
pub struct LpBound {
    /// A value no feasible solution can undercut.
    pub lower_bound: f64,
    /// Dual prices per row (in the caller's units), dual-feasible: `Σ columns[j][i]·y[i] ≤ cost[j]`.
    pub duals: Vec<f64>,
}

const EPS: f64 = 1e-9;
const MAX_PIVOTS: usize = 10_000;

impl CoveringLp {
    /// Solves the LP; rows with no demand are dropped. When the demand cannot be covered at all the
    /// bound is 0 (still valid: nothing is claimed).
    pub fn solve(&self) -> LpBound {
        let m = self.demand.len();
        let zero = LpBound { lower_bound: 0.0, duals: vec![0.0; m] };
        let rows: Vec<usize> = (0..m).filter(|&i| self.demand[i] > 0.0).collect();
        if rows.is_empty() || self.columns.is_empty() {
            return zero;
        }
        // Scale each row so its demand is 1.
        let scale: Vec<f64> = rows.iter().map(|&i| 1.0 / self.demand[i]).collect();
        let columns: Vec<(f64, Vec<f64>)> = self
            .columns
            .iter()
            .filter(|(cost, _)| cost.is_finite() && *cost >= 0.0)
            .map(|(cost, a)| (*cost, rows.iter().zip(&scale).map(|(&i, s)| a[i] * s).collect()))
            .collect();
        let Some((scaled_duals, _)) = simplex(rows.len(), &columns) else { return zero };
        // Back to the caller's units, then certify.
        let mut duals = vec![0.0; m];
        for (k, &i) in rows.iter().enumerate() {
            duals[i] = (scaled_duals[k] * scale[k]).max(0.0);
        }
        certify(self, duals)
    }
}

/// An optimal basic solution: the amount of each column and the (uncertified) dual price of each
/// row, in the caller's units; `None` when the demand cannot be covered.
pub struct LpSolution {
    pub amounts: Vec<f64>,
    pub duals: Vec<f64>,
}

impl CoveringLp {
    /// Solves the LP and returns its primal solution too (for rounding, not for bounds: the duals
    /// here are not certified).
    pub fn solve_primal(&self) -> Option<LpSolution> {
        let m = self.demand.len();
        let rows: Vec<usize> = (0..m).filter(|&i| self.demand[i] > 0.0).collect();
        let usable: Vec<usize> = (0..self.columns.len())
            .filter(|&j| self.columns[j].0.is_finite() && self.columns[j].0 >= 0.0)
            .collect();
        if rows.is_empty() {
            return Some(LpSolution { amounts: vec![0.0; self.columns.len()], duals: vec![0.0; m] });
        }
        let scale: Vec<f64> = rows.iter().map(|&i| 1.0 / self.demand[i]).collect();
        let columns: Vec<(f64, Vec<f64>)> = usable
            .iter()
            .map(|&j| {
                let (cost, a) = &self.columns[j];
                (*cost, rows.iter().zip(&scale).map(|(&i, s)| a[i] * s).collect())
            })
            .collect();
        let (scaled_duals, x) = simplex(rows.len(), &columns)?;
        let mut amounts = vec![0.0; self.columns.len()];
        for (k, &j) in usable.iter().enumerate() {
            amounts[j] = x[k];
        }
        let mut duals = vec![0.0; m];
        for (k, &i) in rows.iter().enumerate() {
            duals[i] = (scaled_duals[k] * scale[k]).max(0.0);
        }
        Some(LpSolution { amounts, duals })
    }
}

/// Scales duals down until every column is priced out, then evaluates `b·y`.
fn certify(lp: &CoveringLp, mut duals: Vec<f64>) -> LpBound {
    let mut worst: f64 = 1.0;
    for (cost, a) in &lp.columns {
        let priced: f64 = a.iter().zip(&duals).map(|(a, y)| a * y).sum();
        if priced > 0.0 {
            if *cost <= 0.0 {
                return LpBound { lower_bound: 0.0, duals: vec![0.0; duals.len()] };
            }
            worst = worst.max(priced / cost);
        }
    }
    // A hair more than needed, so rounding in this very check cannot leave a column over its cost.
    let factor = worst * (1.0 + 1e-12);
    for y in &mut duals {
        *y /= factor;
    }
    let lower_bound = lp.demand.iter().zip(&duals).map(|(b, y)| b * y).sum::<f64>().max(0.0);
    LpBound { lower_bound, duals }
}

/// Two-phase tableau simplex on `min c·x, A x − s + r = 1` (demands scaled to 1); returns the duals of
/// the covering rows and the amount of each column, or None when the rows cannot be covered.
fn simplex(m: usize, columns: &[(f64, Vec<f64>)]) -> Option<(Vec<f64>, Vec<f64>)> {
    let n = columns.len();
    let mut t = Tableau::new(m, columns);
    // Columns in the full layout: structural 0..n, surplus n..n+m, artificial n+m..n+2m.
    let mut basis: Vec<usize> = (0..m).map(|i| n + m + i).collect();

    // Phase I: minimise the artificials.
    let phase1_cost: Vec<f64> = (0..n + 2 * m).map(|j| if j >= n + m { 1.0 } else { 0.0 }).collect();
    run(&mut t, &mut basis, &phase1_cost, n + 2 * m)?;
    let infeasibility: f64 =
        basis.iter().enumerate().filter(|(_, &b)| b >= n + m).map(|(i, _)| t.rhs(i)).sum();
    if infeasibility > 1e-7 {
        return None;
    }
    // Phase II: the real costs; artificials may no longer enter.
    let cost: Vec<f64> = (0..n + m).map(|j| if j < n { columns[j].0 } else { 0.0 }).collect();
    run(&mut t, &mut basis, &cost, n + m)?;
    // Duals yᵢ = c_B B⁻¹ eᵢ; the artificial column of row i holds B⁻¹ eᵢ.
    let duals = (0..m)
        .map(|i| basis.iter().enumerate().map(|(r, &b)| cost_of(&cost, b) * t.at(r, n + m + i)).sum())
        .collect();
    let mut x = vec![0.0; n];
    for (r, &b) in basis.iter().enumerate() {
        if b < n {
            x[b] = t.rhs(r).max(0.0);
        }
    }
    Some((duals, x))
}

/// The simplex tableau of `A x − s + r = 1`, storing only the structural and artificial columns and
/// the right-hand side. The surplus column of row `i` starts as the negation of its artificial
/// column, and a pivot (a row divided by a number, multiples of it subtracted from the others) keeps
/// it the exact negation, since negating commutes with rounding to nearest. So a surplus column is
/// read as its negated artificial, and a pivot updates a third fewer entries (the rows are many on a
/// large cluster: one per limited class). Columns are numbered as in the full tableau.
struct Tableau {
    rows: Vec<Vec<f64>>,
    n: usize,
    m: usize,
}

impl Tableau {
    fn new(m: usize, columns: &[(f64, Vec<f64>)]) -> Self {
        let n = columns.len();
        let mut rows = vec![vec![0.0; n + m + 1]; m];
        for (i, row) in rows.iter_mut().enumerate() {
            for (j, (_, a)) in columns.iter().enumerate() {
                row[j] = a[i];
            }
            row[n + i] = 1.0;
            row[n + m] = 1.0;
        }
        Tableau { rows, n, m }
    }

    /// Row `r`'s entry in column `j` of the full tableau.
    fn at(&self, r: usize, j: usize) -> f64 {
        entry(&self.rows[r], j, self.n, self.m)
    }

    fn rhs(&self, r: usize) -> f64 {
        self.rows[r][self.n + self.m]
    }
}

/// Entry `j` of the full tableau from a stored row (see [`Tableau`]).
fn entry(row: &[f64], j: usize, n: usize, m: usize) -> f64 {
    if j < n {
        row[j]
    } else if j < n + m {
        -row[j]
    } else {
        row[j - m]
    }
}

fn cost_of(cost: &[f64], column: usize) -> f64 {
    cost.get(column).copied().unwrap_or(0.0)
}

/// Pivots until no column among the first `enterable` has a negative reduced cost.
///
/// The reduced costs are kept in a row of their own and updated by each pivot, as the tableau's rows
/// are, instead of being summed from the basis for every pivot: on a large cluster the LP has
/// hundreds of rows and takes about a thousand pivots, and summing them was half of the simplex.
/// The kept costs drift from the summed ones by rounding, so they are summed afresh every
/// [`REPRICE_EVERY`] pivots, when a column they let enter has no row to leave, and before the run
/// ends: the run ends only when the summed costs, not the kept ones, find no column to enter.
fn run(t: &mut Tableau, basis: &mut [usize], cost: &[f64], enterable: usize) -> Option<()> {
    let m = t.m;
    let mut in_basis = vec![false; t.n + 2 * m];
    for &b in basis.iter() {
        in_basis[b] = true;
    }
    let mut reduced = reduced_costs(t, basis, cost, enterable);
    let mut since_repriced = 0;
    for _ in 0..MAX_PIVOTS {
        let mut entering = first_negative(&reduced, &in_basis);
        if entering.is_none() || since_repriced == REPRICE_EVERY {
            reduced = reduced_costs(t, basis, cost, enterable);
            since_repriced = 0;
            entering = first_negative(&reduced, &in_basis);
        }
        let Some(j) = entering else { return Some(()) };
        // Ratio test; ties broken by the smallest basis index (Bland).
        let mut leave: Option<(usize, f64)> = None;
        for r in 0..m {
            let a = t.at(r, j);
            if a > EPS {
                let ratio = t.rhs(r) / a;
                let better = match leave {
                    None => true,
                    Some((lr, lratio)) => {
                        ratio < lratio - EPS || (ratio <= lratio + EPS && basis[r] < basis[lr])
                    }
                };
                if better {
                    leave = Some((r, ratio));
                }
            }
        }
        let Some((r, _)) = leave else {
            // No row limits column j: its kept cost drifted below zero (a column whose summed
            // cost is negative always has a row, the costs being non-negative). Sum them again.
            if since_repriced == 0 {
                return None; // unbounded: cannot happen with non-negative costs, but never loop
            }
            since_repriced = REPRICE_EVERY;
            continue;
        };
        pivot(t, r, j);
        // The cost row is updated as every other row: less its entry in column j times row r.
        let step = reduced[j];
        for (k, d) in reduced.iter_mut().enumerate() {
            *d -= step * t.at(r, k);
        }
        in_basis[basis[r]] = false;
        in_basis[j] = true;
        basis[r] = j;
        since_repriced += 1;
    }
    None
}

/// Pivots between two summings of the reduced costs in [`run`]: enough that summing (a pass over
/// the whole tableau) costs little next to the pivots, few enough that the kept costs stay within
/// rounding of the summed ones.
const REPRICE_EVERY: usize = 64;

/// The first column (Bland's rule) not in the basis whose reduced cost is negative.
fn first_negative(reduced: &[f64], in_basis: &[bool]) -> Option<usize> {
    (0..reduced.len()).find(|&j| !in_basis[j] && reduced[j] < -EPS)
}

/// The reduced cost `c_j − Σ_r c_B(r)·t[r][j]` of each of the first `enterable` columns. The tableau is
/// read along its rows rather than down each column, and rows whose basic column costs nothing are
/// left out (their terms are zero); each sum has the same non-zero terms in the same order as
/// summing down the column. A surplus column's sum is its artificial's, negated.
fn reduced_costs(t: &Tableau, basis: &[usize], cost: &[f64], enterable: usize) -> Vec<f64> {
    let mut sums = vec![0.0; enterable];
    for (&b, row) in basis.iter().zip(&t.rows) {
        let c = cost_of(cost, b);
        if c == 0.0 {
            continue;
        }
        for (j, sum) in sums.iter_mut().enumerate() {
            *sum += c * entry(row, j, t.n, t.m);
        }
    }
    sums.iter().enumerate().map(|(j, sum)| cost_of(cost, j) - sum).collect()
}

/// Divides row `r` by its entry in column `j` and subtracts multiples of it from the other rows so
/// that column `j` becomes the unit vector of row `r`. A pivot row is mostly zeros (a node-count row
/// names only the templates its class may use, and stays sparse through the pivots), so when fewer
/// than half its entries are non-zero only those are subtracted: the entries it would subtract zero
/// from keep their value.
fn pivot(t: &mut Tableau, r: usize, j: usize) {
    let (n, m) = (t.n, t.m);
    let p = t.at(r, j);
    for v in t.rows[r].iter_mut() {
        *v /= p;
    }
    let pivot_row = t.rows[r].clone();
    let nonzero: Vec<usize> = (0..pivot_row.len()).filter(|&i| pivot_row[i] != 0.0).collect();
    let sparse = nonzero.len() * 2 < pivot_row.len();
    for (k, row) in t.rows.iter_mut().enumerate() {
        if k == r {
            continue;
        }
        let f = entry(row, j, n, m);
        if f == 0.0 {
            continue;
        }
        if sparse {
            for &i in &nonzero {
                row[i] -= f * pivot_row[i];
            }
        } else {
            for (v, pv) in row.iter_mut().zip(&pivot_row) {
                *v -= f * pv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_column_needs_the_binding_row() {
        // One type with 4 cpu / 16 memory for 1.0: demand 10 cpu, 20 memory → 2.5 nodes.
        let lp = CoveringLp { demand: vec![10.0, 20.0], columns: vec![(1.0, vec![4.0, 16.0])] };
        let b = lp.solve();
        assert!((b.lower_bound - 2.5).abs() < 1e-6, "{b:?}");
    }

    #[test]
    fn mixes_complementary_columns() {
        // cpu-heavy (4, 1) and memory-heavy (1, 4) at 1.0 each, balanced (4, 4) at 2.5; demand (5, 5):
        // one of each covers it for 2.0, cheaper than 1.25 balanced nodes (3.125).
        let lp = CoveringLp {
            demand: vec![5.0, 5.0],
            columns: vec![(1.0, vec![4.0, 1.0]), (1.0, vec![1.0, 4.0]), (2.5, vec![4.0, 4.0])],
        };
        let b = lp.solve();
        assert!((b.lower_bound - 2.0).abs() < 1e-6, "{b:?}");
    }

    #[test]
    fn uncoverable_demand_gives_zero() {
        let lp = CoveringLp { demand: vec![1.0, 1.0], columns: vec![(1.0, vec![1.0, 0.0])] };
        assert_eq!(lp.solve().lower_bound, 0.0);
    }

    #[test]
    fn duals_are_feasible_and_bound_is_below_any_integer_solution() {
        // Random-ish instance: every integer combination costs at least the bound.
        let columns =
            vec![(0.3, vec![2.0, 8.0, 1.0]), (0.5, vec![4.0, 8.0, 1.0]), (0.9, vec![8.0, 32.0, 1.0])];
        let lp = CoveringLp { demand: vec![13.0, 40.0, 3.0], columns: columns.clone() };
        let b = lp.solve();
        for (cost, a) in &columns {
            let priced: f64 = a.iter().zip(&b.duals).map(|(a, y)| a * y).sum();
            assert!(priced <= cost + 1e-12);
        }
        let mut best = f64::INFINITY;
        for x0 in 0..10 {
            for x1 in 0..6 {
                for x2 in 0..4 {
                    let x = [x0 as f64, x1 as f64, x2 as f64];
                    let covers =
                        (0..3).all(|i| (0..3).map(|j| columns[j].1[i] * x[j]).sum::<f64>() >= lp.demand[i]);
                    if covers {
                        best = best.min((0..3).map(|j| columns[j].0 * x[j]).sum());
                    }
                }
            }
        }
        assert!(b.lower_bound <= best + 1e-9 && b.lower_bound > 0.5 * best, "{} vs {best}", b.lower_bound);
    }

    /// The textbook two-phase simplex on the full tableau (structural, surplus and artificial
    /// columns), with Bland's rule and the same ratio test: what [`simplex`] computes.
    fn simplex_on_the_full_tableau(m: usize, columns: &[(f64, Vec<f64>)]) -> Option<(Vec<f64>, Vec<f64>)> {
        let n = columns.len();
        let rhs = n + 2 * m;
        let mut t = vec![vec![0.0; rhs + 1]; m];
        for (i, row) in t.iter_mut().enumerate() {
            for (j, (_, a)) in columns.iter().enumerate() {
                row[j] = a[i];
            }
            row[n + i] = -1.0;
            row[n + m + i] = 1.0;
            row[rhs] = 1.0;
        }
        let mut basis: Vec<usize> = (0..m).map(|i| n + m + i).collect();
        let phases = [
            ((0..rhs).map(|j| if j >= n + m { 1.0 } else { 0.0 }).collect::<Vec<f64>>(), rhs),
            ((0..n + m).map(|j| if j < n { columns[j].0 } else { 0.0 }).collect(), n + m),
        ];
        for (phase, (cost, enterable)) in phases.iter().enumerate() {
            let mut pivots = 0;
            while let Some(j) = (0..*enterable).find(|&j| {
                let priced: f64 = (0..m).map(|r| cost_of(cost, basis[r]) * t[r][j]).sum();
                !basis.contains(&j) && cost_of(cost, j) - priced < -EPS
            }) {
                let mut leave: Option<(usize, f64)> = None;
                for r in (0..m).filter(|&r| t[r][j] > EPS) {
                    let ratio = t[r][rhs] / t[r][j];
                    if leave.is_none_or(|(lr, lratio)| {
                        ratio < lratio - EPS || (ratio <= lratio + EPS && basis[r] < basis[lr])
                    }) {
                        leave = Some((r, ratio));
                    }
                }
                let (r, _) = leave?;
                let p = t[r][j];
                t[r].iter_mut().for_each(|v| *v /= p);
                let pivot_row = t[r].clone();
                for (_, row) in t.iter_mut().enumerate().filter(|(k, _)| *k != r) {
                    let f = row[j];
                    if f != 0.0 {
                        row.iter_mut().zip(&pivot_row).for_each(|(v, pv)| *v -= f * pv);
                    }
                }
                basis[r] = j;
                pivots += 1;
                assert!(pivots < MAX_PIVOTS);
            }
            if phase == 0 {
                let infeasibility: f64 =
                    basis.iter().enumerate().filter(|(_, &b)| b >= n + m).map(|(i, _)| t[i][rhs]).sum();
                if infeasibility > 1e-7 {
                    return None;
                }
            }
        }
        let cost = &phases[1].0;
        let duals = (0..m).map(|i| (0..m).map(|r| cost_of(cost, basis[r]) * t[r][n + m + i]).sum()).collect();
        let mut x = vec![0.0; n];
        for (r, &b) in basis.iter().enumerate().filter(|(_, &b)| b < n) {
            x[b] = t[r][rhs].max(0.0);
        }
        Some((duals, x))
    }

    #[test]
    fn the_tableau_without_surplus_columns_pivots_as_the_full_one() {
        // A fixed pseudo-random sequence (a 64-bit LCG): many small covering LPs, some with columns
        // that cover nothing of a row, some with equal columns (ties in the ratio test).
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |below: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % below
        };
        let mut compared = 0;
        for _ in 0..400 {
            let m = 1 + next(10) as usize;
            let n = 1 + next(90) as usize;
            let columns: Vec<(f64, Vec<f64>)> = (0..n)
                .map(|_| {
                    let cost = (1 + next(40)) as f64 / 8.0;
                    let a = (0..m).map(|_| if next(3) == 0 { 0.0 } else { next(17) as f64 / 4.0 }).collect();
                    (cost, a)
                })
                .collect();
            let ours = simplex(m, &columns);
            assert_eq!(ours, simplex_on_the_full_tableau(m, &columns), "m={m} n={n} {columns:?}");
            compared += usize::from(ours.is_some());
        }
        assert!(compared > 200, "most of the instances can be covered: {compared}");
    }

    #[test]
    fn large_magnitudes_are_scaled() {
        // Millicores and bytes in one LP.
        let gib = 1024.0 * 1024.0 * 1024.0;
        let lp = CoveringLp {
            demand: vec![100_000.0, 400.0 * gib],
            columns: vec![(0.192, vec![3860.0, 11.5 * gib]), (0.126, vec![1900.0, 13.0 * gib])],
        };
        let b = lp.solve();
        assert!(b.lower_bound > 1.0 && b.lower_bound < 6.0, "{b:?}");
    }
}
