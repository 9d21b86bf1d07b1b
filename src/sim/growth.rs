//! How solve time grows with the number of pods, judged against `n log n`, for the `bench` and
//! `bench-upstream` outputs (here, below both, so `bench-upstream` can use it).
//!
//! Time divided by `n · log2 n` is constant when a solver grows exactly like `n log n`, falls when it
//! grows more gently and rises when it grows faster. The report prints that normalised cost per size
//! and, from the smallest size to each larger one, the time factor beside the `n log n` factor. The
//! verdict allows [`NOISE`] on top of `n log n`: sizes of one or two seconds on a shared two-core
//! machine move by that much from run to run, while a quadratic step between sizes two and a half
//! times apart is a factor of six, far outside it.

/// Relative slack on top of `n log n` before a step counts as faster growth (timing noise).
pub const NOISE: f64 = 0.25;

/// One measured point: pods solved and seconds taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub pods: usize,
    pub seconds: f64,
}

fn n_log_n(pods: usize) -> f64 {
    let n = pods.max(2) as f64;
    n * n.log2()
}

/// Time per `n log2 n`, in nanoseconds.
pub fn normalised_ns(point: Point) -> f64 {
    point.seconds * 1e9 / n_log_n(point.pods)
}

/// Whether every size grows from the smallest no faster than `n log n` (with [`NOISE`]).
pub fn within_n_log_n(points: &[Point]) -> bool {
    let Some(first) = points.iter().min_by_key(|p| p.pods) else { return true };
    points.iter().all(|p| normalised_ns(*p) <= normalised_ns(*first) * (1.0 + NOISE))
}

/// A small table (pods, seconds, ns per n·log2 n, time and n log n factors from the smallest size)
/// and a verdict line; `label` names the series. Points are sorted by pods.
pub fn render(label: &str, points: &[Point]) -> String {
    let mut points = points.to_vec();
    points.sort_by_key(|p| p.pods);
    let Some(first) = points.first().copied() else { return String::new() };
    let mut out = format!("solve time against pods, {label}:\n");
    out.push_str(&format!(
        "{:>7} {:>9} {:>17} {:>13} {:>15}\n",
        "pods", "seconds", "ns per n·log2 n", "time factor", "n log n factor"
    ));
    for p in &points {
        out.push_str(&format!(
            "{:>7} {:>9.3} {:>17.1} {:>13.2} {:>15.2}\n",
            p.pods,
            p.seconds,
            normalised_ns(*p),
            p.seconds / first.seconds.max(1e-9),
            n_log_n(p.pods) / n_log_n(first.pods)
        ));
    }
    let last = points.last().copied().unwrap_or(first);
    let verdict = if within_n_log_n(&points) { "no worse than n log n" } else { "FASTER than n log n" };
    out.push_str(&format!(
        "growth {}–{} pods: {verdict} (time ×{:.1} for n log n ×{:.1}; {:.0} % noise allowed)\n",
        first.pods,
        last.pods,
        last.seconds / first.seconds.max(1e-9),
        n_log_n(last.pods) / n_log_n(first.pods),
        NOISE * 100.0
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(f: impl Fn(f64) -> f64) -> Vec<Point> {
        [1_000, 2_000, 5_000, 10_000, 20_000, 50_000]
            .into_iter()
            .map(|pods| Point { pods, seconds: f(pods as f64) })
            .collect()
    }

    #[test]
    fn linear_and_n_log_n_pass_quadratic_and_n_to_the_1_3_fail() {
        assert!(within_n_log_n(&series(|n| n * 1e-5)));
        assert!(within_n_log_n(&series(|n| n * n.log2() * 1e-6)));
        assert!(!within_n_log_n(&series(|n| n * n * 1e-9)));
        assert!(!within_n_log_n(&series(|n| n.powf(1.3) * 1e-6)));
    }

    #[test]
    fn one_slow_large_size_fails_even_when_the_rest_is_linear() {
        let mut points = series(|n| n * 1e-5);
        points[5].seconds *= 2.0;
        assert!(!within_n_log_n(&points));
        let text = render("test", &points);
        assert!(text.contains("FASTER than n log n"), "{text}");
    }

    #[test]
    fn the_table_lists_every_size_in_order() {
        let mut points = series(|n| n * 1e-5);
        points.reverse();
        let text = render("mixed", &points);
        let sizes: Vec<&str> =
            text.lines().skip(2).filter_map(|l| l.split_whitespace().next()).take(6).collect();
        assert_eq!(sizes, ["1000", "2000", "5000", "10000", "20000", "50000"]);
        assert!(text.contains("no worse than n log n"), "{text}");
    }
}
