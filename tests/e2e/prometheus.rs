//! Reading the controller's metrics the ways a user does: over HTTP, through `promtool check metrics`,
//! and scraped by a real Prometheus server (Debian's `prometheus` package provides both binaries).
//!
//! [`Prometheus::start`] runs `prometheus` on a free loopback port with a generated configuration that
//! scrapes one target every second, its storage in a temporary directory and its output in the cluster's
//! log directory. It is killed when dropped, also while a failed test unwinds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::controller::free_ports;

const INSTALL_HINT: &str =
    "run `hack/deps.sh`, which installs Debian's prometheus package (the prometheus and promtool binaries)";

/// One sample of the text format.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a Prometheus text-format page (label values unescaped).
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let bad = || format!("unreadable sample line {line:?}");
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(bad()),
        };
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices();
            let mut key = String::new();
            loop {
                let Some((i, c)) = chars.next() else { return Err(bad()) };
                match c {
                    '}' => {
                        rest = &inner[i + 1..];
                        break;
                    }
                    ',' if key.is_empty() => {}
                    '=' => {
                        if chars.next().map(|(_, c)| c) != Some('"') {
                            return Err(bad());
                        }
                        let mut value = String::new();
                        loop {
                            match chars.next().map(|(_, c)| c) {
                                Some('"') => break,
                                Some('\\') => match chars.next().map(|(_, c)| c) {
                                    Some('n') => value.push('\n'),
                                    Some(other) => value.push(other),
                                    None => return Err(bad()),
                                },
                                Some(other) => value.push(other),
                                None => return Err(bad()),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    other => key.push(other),
                }
            }
        }
        let value = rest.split_whitespace().next().ok_or_else(bad)?;
        let value = value.parse().map_err(|_| bad())?;
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    Ok(samples)
}

/// The sum of the samples named `name` whose labels include `labels`; `None` when there are none.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|got| got == v)))
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// GET `url` as Prometheus scrapes, accepting gzip: the status and the body, decompressed when the
/// server compressed it.
pub async fn get(url: &str) -> Result<(u16, String), String> {
    use std::io::Read;

    let request = reqwest::Client::new().get(url).header(reqwest::header::ACCEPT_ENCODING, "gzip");
    let response = request.send().await.map_err(|err| format!("GET {url}: {err}"))?;
    let status = response.status().as_u16();
    let encoding = response.headers().get(reqwest::header::CONTENT_ENCODING).cloned();
    let bytes = response.bytes().await.map_err(|err| format!("GET {url}: reading the body: {err}"))?;
    let mut body = String::new();
    match encoding {
        Some(gzip) if gzip == "gzip" => flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut body),
        _ => (&bytes[..]).read_to_string(&mut body),
    }
    .map_err(|err| format!("GET {url}: decoding the body: {err}"))?;
    Ok((status, body))
}

/// The path of `binary` on PATH; a test that needs it fails with how to install it.
pub fn require(binary: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{binary} is not on PATH: {INSTALL_HINT}"))
}

/// `promtool check metrics` on `text`: exit code and what it printed.
pub fn promtool_check(text: &str) -> (i32, String) {
    use std::io::Write;
    let mut child = Command::new(require("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child.stdin.take().expect("promtool's stdin").write_all(text.as_bytes()).expect("writing to promtool");
    let output = child.wait_with_output().expect("promtool finishes");
    let printed =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), printed)
}

/// A `prometheus` server scraping one target.
pub struct Prometheus {
    /// Behind a lock so that the probes take `&self` and can run inside `wait::until`.
    child: std::sync::Mutex<Child>,
    port: u16,
    _storage: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `target` (`host:port`) every second; its
    /// output goes to `log`.
    pub fn start(target: &str, log: &Path) -> Prometheus {
        let binary = require("prometheus");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("prometheus.yml");
        let text = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n\
             - job_name: karpenter-azure\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  \
               static_configs: [{{targets: ['{target}']}}]\n"
        );
        std::fs::write(&config, text).expect("writing the Prometheus configuration");
        let [port, _] = free_ports();
        let out = std::fs::File::create(log).unwrap_or_else(|err| panic!("{}: {err}", log.display()));
        let err = out.try_clone().expect("log file handle clones");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|err| panic!("starting prometheus: {err}"));
        eprintln!("e2e: prometheus started (pid {}) on 127.0.0.1:{port}, log {}", child.id(), log.display());
        Prometheus { child: std::sync::Mutex::new(child), port, _storage: dir }
    }

    /// The port its HTTP API listens on (loopback).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The scrape target's health (`up`, `down`, `unknown`) and last error, once Prometheus answers.
    pub async fn target_health(&self) -> Result<(String, String), String> {
        let exited = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).try_wait();
        if let Ok(Some(status)) = exited {
            panic!("prometheus exited ({status}); see its log");
        }
        let (status, body) = get(&format!("http://127.0.0.1:{}/api/v1/targets", self.port)).await?;
        let json: Value = serde_json::from_str(&body).map_err(|err| format!("targets ({status}): {err}"))?;
        let target = &json["data"]["activeTargets"][0];
        let field = |key: &str| target[key].as_str().unwrap_or_default().to_string();
        if target.is_null() {
            return Err(format!("no active target yet: {body}"));
        }
        Ok((field("health"), field("lastError")))
    }

    /// The value of an instant query that returns one series.
    pub async fn query_one(&self, query: &str) -> Result<f64, String> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let response = reqwest::Client::new()
            .get(&url)
            .query(&[("query", query)])
            .send()
            .await
            .map_err(|err| format!("query {query}: {err}"))?;
        let body = response.text().await.map_err(|err| format!("query {query}: {err}"))?;
        let json: Value =
            serde_json::from_str(&body).map_err(|err| format!("query {query}: {err}: {body}"))?;
        let result = json["data"]["result"].as_array().cloned().unwrap_or_default();
        match result.as_slice() {
            [one] => one["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("query {query}: no value in {one}")),
            _ => Err(format!("query {query}: {} series: {body}", result.len())),
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}
