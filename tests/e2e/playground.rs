//! The README's playground section, run verbatim: its `sh` blocks, extracted from README.md, go one by one
//! into one bash process (so `eval "$(hack/playground.sh env)"` carries over to the next block, as in a
//! user's terminal). Between blocks the test checks what the README promises: the inflate pods run on
//! Nodes the controller launched, scaling to zero removes those Nodes, and `make playground-down` leaves
//! no process of the playground running.
//!
//! The playground is its own control plane, fake ARM and controller (not this binary's shared cluster), in a
//! directory of its own (`PLAYGROUND_DIR`). It runs the binaries hack/test.sh builds
//! (`PLAYGROUND_NO_BUILD=1`): `cargo test` holds cargo's build lock while the tests run.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

const SECTION: &str = "## Playground";
const DONE: &str = "__readme_block_done__";
const POOL_LABEL: &str = "karpenter.sh/nodepool";

#[test]
fn the_readme_playground_runs_verbatim_and_leaves_nothing_running() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let blocks =
        playground_blocks(&std::fs::read_to_string(repo.join("README.md")).expect("README.md reads"));
    let [up, inflate, scale_down, down] = <[String; 4]>::try_from(blocks.clone()).unwrap_or_else(|b| {
        panic!("the playground section has 4 sh blocks (up, inflate, scale down, down); found {b:?}")
    });
    assert!(up.contains("make playground") && down.contains("make playground-down"), "{blocks:?}");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut shell = Shell::start(&repo, dir.path());
    let kubectl = Kubectl { dir: dir.path().to_path_buf() };

    let started = Instant::now();
    shell.run("make playground", &up, Duration::from_secs(300));
    eprintln!("playground: up in {:.0}s", started.elapsed().as_secs_f64());
    assert!(kubectl.items("nodes", "").iter().all(|n| n["metadata"]["labels"][POOL_LABEL].is_null()));

    let started = Instant::now();
    shell.run("inflate", &inflate, Duration::from_secs(420));
    let pods = kubectl.items("pods", "app=inflate");
    assert_eq!(pods.len(), 5, "examples/inflate.yaml asks for 5 replicas");
    let launched: Vec<String> = kubectl
        .items("nodes", POOL_LABEL)
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!launched.is_empty(), "the controller launched Nodes of pool general");
    for pod in &pods {
        assert_eq!(pod["status"]["phase"], "Running", "{}", pod["metadata"]["name"]);
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        assert!(
            launched.iter().any(|n| n == node),
            "pod {} runs on launched node {node:?}",
            pod["metadata"]["name"]
        );
    }
    assert_eq!(kubectl.items("nodeclaims", "").len(), launched.len(), "one NodeClaim per launched Node");
    eprintln!(
        "playground: {} pods on {} new nodes in {:.0}s",
        pods.len(),
        launched.len(),
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    shell.run("scale to zero", &scale_down, Duration::from_secs(420));
    assert!(kubectl.items("nodeclaims", "").is_empty(), "every NodeClaim is gone");
    assert!(kubectl.items("nodes", POOL_LABEL).is_empty(), "every launched Node is gone");
    eprintln!("playground: consolidated to zero in {:.0}s", started.elapsed().as_secs_f64());

    let pids = recorded_pids(dir.path());
    assert!(pids.len() >= 4, "the playground recorded its processes: {pids:?}");
    shell.run("make playground-down", &down, Duration::from_secs(120));
    shell.finish();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
        let named = processes_naming(dir.path());
        if left.is_empty() && named.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after playground-down: recorded {left:?}, naming its directory {named:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The bodies of the ```` ```sh ```` blocks of the README's playground section, in order.
fn playground_blocks(readme: &str) -> Vec<String> {
    let start = readme.find(SECTION).expect("README.md has a playground section");
    let section = &readme[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(body), text) => {
                body.push_str(text);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// One bash process that runs the blocks in turn, like a terminal. Its stdout comes back line by line; its
/// stderr goes to a log file that a failure prints.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    log: PathBuf,
}

impl Shell {
    fn start(repo: &Path, dir: &Path) -> Shell {
        let log = dir.join("readme-shell.log");
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(repo)
            .env("PLAYGROUND_DIR", dir)
            .env("PLAYGROUND_NO_BUILD", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the shell log opens"))
            .spawn()
            .expect("bash starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell { child, stdin, lines, log };
        // A failing command stops the script, as the README's reader would stop.
        shell.write("set -eo pipefail\n");
        shell
    }

    fn write(&mut self, text: &str) {
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("bash reads its input");
    }

    /// Runs one block and waits for it to finish; on failure or timeout, prints what the shell wrote.
    fn run(&mut self, what: &str, block: &str, timeout: Duration) {
        self.write(&format!("{block}\necho {DONE}\n"));
        let deadline = Instant::now() + timeout;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line == DONE => return,
                Ok(line) => eprintln!("  | {line}"),
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("`{what}` did not finish within {timeout:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("`{what}` failed (the shell exited)"))
                }
            }
        }
    }

    fn finish(mut self) {
        self.write("exit 0\n");
        let status = self.child.wait().expect("bash exits");
        assert!(status.success(), "the README shell exited with {status}");
    }

    fn fail(&mut self, message: &str) -> ! {
        let _ = self.child.kill();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        // Whatever the playground started must not outlive the test.
        let dir = self.log.parent().unwrap().to_path_buf();
        let _ = Command::new("hack/playground.sh")
            .arg("down")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PLAYGROUND_DIR", &dir)
            .status();
        panic!("{message}; the shell's stderr ends with:\n{}", tail.join("\n"));
    }
}

/// The playground's own kubectl against its own cluster.
struct Kubectl {
    dir: PathBuf,
}

impl Kubectl {
    fn items(&self, resource: &str, selector: &str) -> Vec<Value> {
        let mut command = Command::new(self.dir.join("bin/kubectl"));
        command
            .arg("--kubeconfig")
            .arg(self.dir.join("cluster/kubeconfig"))
            .args(["get", resource, "-o", "json"]);
        if resource == "pods" {
            command.args(["-n", "default"]);
        }
        if !selector.is_empty() {
            command.args(["-l", selector]);
        }
        let output = command.output().expect("kubectl runs");
        assert!(
            output.status.success(),
            "kubectl get {resource}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let list: Value = serde_json::from_slice(&output.stdout).expect("kubectl prints JSON");
        list["items"].as_array().cloned().unwrap_or_default()
    }
}

/// Every pid the playground and its control plane recorded (`*.pid` files; the playground's hold
/// "<pid> <start time>").
fn recorded_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("cluster")] {
        for entry in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
            if entry.path().extension().is_some_and(|e| e == "pid") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                pids.extend(text.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()));
            }
        }
    }
    pids
}

/// A live (not zombie) process.
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next()).unwrap_or_default();
    !matches!(state, Some('Z' | 'X'))
}

/// Live processes whose command line names the playground's directory.
fn processes_naming(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.to_string_lossy().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id() && alive(*pid))
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&needle).then_some((pid, cmdline))
        })
        .collect()
}
