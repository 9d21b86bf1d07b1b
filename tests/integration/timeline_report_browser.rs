//! The timeline's HTML report opened in a real browser (Debian's headless `chromium`, installed by
//! `hack/deps.sh`): the page renders with no console error, its script ran (the summary is filled from
//! the embedded data), the plot's series are in the rendered document, and its numbers are the ones
//! `--output json` printed for the same run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(out) = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output() {
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !path.is_empty() {
                return PathBuf::from(path);
            }
        }
    }
    panic!(
        "no headless browser: `chromium` is not installed; run hack/deps.sh (it installs Debian's chromium)"
    );
}

/// Loads the page headless and returns (the rendered DOM, the browser's log). Both go to files: the
/// DOM is larger than a pipe holds, and a browser blocked on a full pipe never exits.
fn render(page: &Path, dir: &Path) -> (String, String) {
    let (dom_file, log_file) = (dir.join("dom.html"), dir.join("browser.log"));
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-extensions",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--no-default-browser-check",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::from(std::fs::File::create(&dom_file).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&log_file).unwrap()))
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish rendering the page in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    assert!(status.success(), "chromium failed: {log}");
    (std::fs::read_to_string(&dom_file).unwrap(), log)
}

fn attribute<'a>(dom: &'a str, element_id: &str, name: &str) -> &'a str {
    let start =
        dom.find(&format!("id=\"{element_id}\"")).unwrap_or_else(|| panic!("#{element_id} not rendered"));
    let tag_start = dom[..start].rfind('<').unwrap();
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>').unwrap()];
    let key = format!("{name}=\"");
    let at = tag.find(&key).unwrap_or_else(|| panic!("#{element_id} has no {name}: {tag}")) + key.len();
    &tag[at..at + tag[at..].find('"').unwrap()]
}

#[test]
fn the_demo_report_renders_in_a_headless_browser_with_the_runs_numbers() {
    let dir = std::env::temp_dir().join(format!("karpenter-azure-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("demo.html");
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-azure"))
        .args(["simulate", "--timeline", "demo", "--output", "json", "--report"])
        .arg(&page)
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();

    let (dom, log) = render(&page, &dir);
    let console_errors: Vec<&str> =
        log.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console_errors.is_empty(), "the page logged to the console:\n{}", console_errors.join("\n"));

    // The script ran and read the embedded data.
    assert_eq!(attribute(&dom, "summary", "data-filled"), "yes", "the page's script did not run");
    let cost = json["summary"]["cost_dollars"].as_f64().unwrap();
    assert_eq!(attribute(&dom, "summary", "data-cost-dollars"), format!("{cost:.2}"));
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(attribute(&dom, "summary", "data-steps"), steps.len().to_string());

    // Every series is drawn, and each ends at the JSON's last value.
    let last = steps.last().unwrap();
    let mut expected = vec![
        ("$/h".to_string(), last["price_per_hour"].as_f64().unwrap()),
        ("lower bound $/h".to_string(), last["lower_bound_per_hour"].as_f64().unwrap()),
        ("pending pods".to_string(), last["pending_pods"].as_f64().unwrap()),
        ("pods on booting nodes".to_string(), last["starting_pods"].as_f64().unwrap()),
    ];
    let mut capacity_types: Vec<String> =
        steps.iter().flat_map(|s| s["nodes_by_capacity_type"].as_object().unwrap().keys().cloned()).collect();
    capacity_types.sort();
    capacity_types.dedup();
    assert!(!capacity_types.is_empty());
    for c in capacity_types {
        let v = last["nodes_by_capacity_type"].get(&c).and_then(Value::as_f64).unwrap_or(0.0);
        expected.push((format!("{c} nodes"), v));
    }
    for (series, value) in expected {
        let marker = format!("data-series=\"{}\"", series.replace('&', "&amp;"));
        let at = dom.find(&marker).unwrap_or_else(|| panic!("series {series} is not in the rendered page"));
        let tag = &dom[at..at + dom[at..].find('>').unwrap()];
        let last_attr = tag.split("data-last=\"").nth(1).and_then(|t| t.split('"').next()).unwrap();
        let drawn: f64 = last_attr.parse().unwrap();
        assert!((drawn - value).abs() < 1e-9, "{series}: drawn {drawn}, JSON {value}");
        assert!(tag.contains("points=\""), "{series} has no points");
    }
    // One table row per decision.
    let table = &dom[dom.find("id=\"decisions\"").unwrap()..];
    assert_eq!(table.matches("<tr><td>").count(), json["decisions"].as_array().unwrap().len());
    let _ = std::fs::remove_dir_all(dir);
}
