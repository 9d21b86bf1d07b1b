//! The `--report FILE.html` page: one self-contained file (no network, no external script or font)
//! with SVG plots of $/h against the lower bound, nodes by capacity type and pending pods over time,
//! and a table of every decision. The plots are drawn here, so the page shows them without script;
//! a short inline script only fills the summary line from the embedded JSON, which lets a browser
//! test see that the page's script ran and read the same numbers as `--output json`.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::engine::{Run, Sample};
use super::output;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 220.0;
const MARGIN_LEFT: f64 = 56.0;
const MARGIN_BOTTOM: f64 = 24.0;
const MARGIN_TOP: f64 = 12.0;
/// One colour per series, chosen to stay distinct for common colour-vision deficiencies.
const COLOURS: [&str; 6] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One series of a chart: its name and its value per sample.
struct Series {
    name: String,
    values: Vec<f64>,
}

/// `floor` is the smallest top of the value axis (1 for counts, so an all-zero series sits on the axis).
fn chart(
    id: &str,
    title: &str,
    floor: f64,
    samples: &[Sample],
    series: &[Series],
    markers: &[u64],
) -> String {
    let t_max = samples.last().map_or(1, |s| s.offset_seconds.max(1)) as f64;
    let v_max = series.iter().flat_map(|s| s.values.iter().copied()).fold(floor, f64::max) * 1.1;
    let x = |t: u64| MARGIN_LEFT + (t as f64 / t_max) * (WIDTH - MARGIN_LEFT - 8.0);
    let y = |v: f64| MARGIN_TOP + (1.0 - v / v_max) * (HEIGHT - MARGIN_TOP - MARGIN_BOTTOM);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure><figcaption>{}</figcaption><svg id="{id}" role="img" aria-label="{}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">"#,
        escape(title),
        escape(title)
    );
    // Axes, with a label at the top value and every few hours.
    let _ = write!(
        svg,
        r##"<line x1="{MARGIN_LEFT}" y1="{}" x2="{}" y2="{}" stroke="#888"/><line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" y2="{}" stroke="#888"/>"##,
        HEIGHT - MARGIN_BOTTOM,
        WIDTH - 8.0,
        HEIGHT - MARGIN_BOTTOM,
        HEIGHT - MARGIN_BOTTOM
    );
    for fraction in [0.0, 0.5, 1.0] {
        let v = v_max / 1.1 * fraction;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="end" fill="#444">{}</text>"##,
            MARGIN_LEFT - 4.0,
            y(v) + 4.0,
            escape(&trim(v))
        );
    }
    let hours = (t_max / 3600.0).ceil() as u64;
    let step = (hours / 8).max(1);
    for h in (0..=hours).step_by(step as usize) {
        let t = h * 3600;
        if t as f64 > t_max {
            break;
        }
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#444">{h}h</text>"##,
            x(t),
            HEIGHT - 6.0
        );
    }
    for &t in markers {
        let _ = write!(
            svg,
            r##"<line class="decision" x1="{0}" y1="{MARGIN_TOP}" x2="{0}" y2="{1}" stroke="#bbb" stroke-dasharray="2,3"/>"##,
            x(t),
            HEIGHT - MARGIN_BOTTOM
        );
    }
    for (i, s) in series.iter().enumerate() {
        // A step line: the value holds until the next sample.
        let mut points = String::new();
        for (k, sample) in samples.iter().enumerate() {
            let v = s.values[k];
            if k > 0 {
                let _ = write!(points, "{:.1},{:.1} ", x(sample.offset_seconds), y(s.values[k - 1]));
            }
            let _ = write!(points, "{:.1},{:.1} ", x(sample.offset_seconds), y(v));
        }
        let colour = COLOURS[i % COLOURS.len()];
        let _ = write!(
            svg,
            r#"<polyline class="series" data-series="{}" data-last="{}" fill="none" stroke="{colour}" stroke-width="1.6" points="{}"/>"#,
            escape(&s.name),
            s.values.last().copied().unwrap_or(0.0),
            points.trim_end()
        );
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="12" fill="{colour}">{}</text>"#,
            MARGIN_LEFT + 10.0 + 180.0 * i as f64,
            MARGIN_TOP + 12.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

fn trim(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Renders the page for a run; `title` names the timeline.
pub fn render(run: &Run, title: &str) -> String {
    let samples = &run.samples;
    let markers: Vec<u64> =
        run.decisions.iter().filter(|d| d.reason != "Event").map(|d| d.offset_seconds).collect();
    let price = [
        Series { name: "$/h".into(), values: samples.iter().map(|s| s.price_per_hour).collect() },
        Series {
            name: "lower bound $/h".into(),
            values: samples.iter().map(|s| s.lower_bound_per_hour).collect(),
        },
    ];
    let capacity_types: BTreeSet<&String> =
        samples.iter().flat_map(|s| s.nodes_by_capacity_type.keys()).collect();
    let nodes: Vec<Series> = capacity_types
        .iter()
        .map(|c| Series {
            name: format!("{c} nodes"),
            values: samples.iter().map(|s| *s.nodes_by_capacity_type.get(*c).unwrap_or(&0) as f64).collect(),
        })
        .collect();
    let pending = [
        Series {
            name: "pending pods".into(),
            values: samples.iter().map(|s| s.pending_pods as f64).collect(),
        },
        Series {
            name: "pods on booting nodes".into(),
            values: samples.iter().map(|s| s.starting_pods as f64).collect(),
        },
    ];
    let data = output::to_json(run);
    // `</` inside a script element would end it early; JSON allows `<\/` for the same text.
    let embedded = data.to_string().replace("</", "<\\/");
    let mut page = String::new();
    let _ = write!(
        page,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} — karpenter-azure timeline</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
figure {{ margin: 16px 0; }} figcaption {{ font-weight: 600; margin-bottom: 4px; }}
table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
</style></head><body>
<h1>{title}</h1>
<p id="summary" data-filled="no">The summary needs the page's script.</p>
"#,
        title = escape(title)
    );
    page.push_str(&chart(
        "price",
        "Cluster $/hour and the lower bound of a from-scratch repack",
        1e-9,
        samples,
        &price,
        &markers,
    ));
    page.push_str(&chart("nodes", "Nodes by capacity type", 1.0, samples, &nodes, &markers));
    page.push_str(&chart(
        "pending",
        "Pods waiting: pending, and bound to a node still booting",
        1.0,
        samples,
        &pending,
        &markers,
    ));
    let stretches = super::above_bound::stretches(run);
    if !stretches.is_empty() {
        let _ = write!(
            page,
            "<h2>Above {}× the lower bound, and what stopped consolidation</h2>\n<table id=\"above-bound\"><thead><tr><th>from</th><th>to</th><th>$/h</th><th>bound $/h</th><th>ratio</th><th>commands</th><th>what stopped consolidation</th></tr></thead><tbody>\n",
            super::above_bound::RATIO
        );
        let clock = |seconds: u64| format!("{}:{:02}", seconds / 3600, seconds % 3600 / 60);
        for st in &stretches {
            let _ = writeln!(
                page,
                r#"<tr><td>{}</td><td>{}</td><td class="num">{:.3}</td><td class="num">{:.3}</td><td class="num">{:.2}</td><td class="num">{}</td><td>{}</td></tr>"#,
                clock(st.from_offset_seconds),
                clock(st.to_offset_seconds),
                st.price_per_hour,
                st.lower_bound_per_hour,
                st.ratio,
                st.commands_executed,
                escape(&super::above_bound::describe(st))
            );
        }
        page.push_str("</tbody></table>\n");
    }
    page.push_str(
        "<h2>Decisions</h2>\n<table id=\"decisions\"><thead><tr><th>time</th><th>reason</th><th>method</th><th>candidates</th><th>replacements</th><th>savings $/h</th><th>outcome</th><th>explanation</th></tr></thead><tbody>\n",
    );
    for d in &run.decisions {
        let _ = writeln!(
            page,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="num">{:.4}</td><td>{}</td><td>{}</td></tr>"#,
            escape(&d.time),
            escape(&d.reason),
            escape(&d.method),
            escape(&d.candidates.join(", ")),
            escape(&d.replacements.join(", ")),
            d.savings_per_hour,
            escape(&d.outcome),
            escape(&d.explanation)
        );
    }
    page.push_str("</tbody></table>\n");
    let _ = write!(
        page,
        r#"<script type="application/json" id="data">{embedded}</script>
<script>
(function () {{
  var data = JSON.parse(document.getElementById("data").textContent);
  var s = data.summary;
  var p = document.getElementById("summary");
  p.textContent = s.hours.toFixed(1) + " h: $" + s.cost_dollars.toFixed(2) + " spent, lower bound $" +
    s.lower_bound_dollars.toFixed(2) + "; peak " + s.peak_nodes + " nodes; " + s.commands_executed +
    " disruption commands executed; " + data.steps.length + " steps.";
  p.dataset.filled = "yes";
  p.dataset.costDollars = s.cost_dollars.toFixed(2);
  p.dataset.steps = String(data.steps.length);
}})();
</script>
</body></html>
"#
    );
    page
}
