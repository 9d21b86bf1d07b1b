//! The set-up the controller tests share, one call per step:
//! - [`controller`]: the CRDs installed, the test's namespace made and the `karpenter-azure controller`
//!   started against the usual fake ARM; [`ControllerBuilder`] takes extra settings, another Node
//!   registrar or other namespaces;
//! - [`class_and_pool_ready`]: an AKSNodeClass and a NodePool applied, waiting until the controller has
//!   made both Ready (it provisions only for Ready pools);
//! - [`running_pods`]: waiting until N pods of a label selector are Running.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;

use super::controller::Controller;
use super::lookups::{condition_is_true, get_json, is_running};
use super::{cluster, crds, objects};
use fake_azure::arm::{FakeArmConfig, KubeNodeRegistrar, NodeRegistrar};

/// How long the controller gets to make a new AKSNodeClass and NodePool Ready; generous for a loaded
/// 2-core machine (it takes a second or two when idle).
pub const READY: Duration = Duration::from_secs(90);
/// How long [`running_pods`] waits unless told otherwise.
pub const PODS_RUNNING: Duration = Duration::from_secs(90);

/// A controller named `name` (its log is `controller-<name>.log`), with the namespace `name`.
pub fn controller(name: &str) -> ControllerBuilder {
    ControllerBuilder {
        name: name.to_string(),
        env: Vec::new(),
        registrar: None,
        namespaces: vec![name.to_string()],
        fake: FakeArmConfig::default(),
    }
}

/// What [`ControllerBuilder::start`] sets up and starts.
pub struct ControllerBuilder {
    name: String,
    env: Vec<(&'static str, String)>,
    registrar: Option<Arc<dyn NodeRegistrar>>,
    namespaces: Vec<String>,
    fake: FakeArmConfig,
}

impl ControllerBuilder {
    /// One more setting of the controller's environment; it wins over the usual one of the same name.
    pub fn env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// More settings, as [`ControllerBuilder::env`].
    pub fn envs(mut self, env: &[(&'static str, String)]) -> Self {
        self.env.extend(env.iter().cloned());
        self
    }

    /// Who registers the VMs' Nodes; the fake ARM's `KubeNodeRegistrar` (kwok plays the kubelet)
    /// unless set.
    pub fn registrar(mut self, registrar: Arc<dyn NodeRegistrar>) -> Self {
        self.registrar = Some(registrar);
        self
    }

    /// How the fake ARM behaves (the harness still sets its registrar, boot delay and client secret).
    pub fn fake_config(mut self, config: FakeArmConfig) -> Self {
        self.fake = config;
        self
    }

    /// The namespaces to make instead of the one named after the controller (none: `&[]`).
    pub fn namespaces(mut self, namespaces: &[&str]) -> Self {
        self.namespaces = namespaces.iter().map(|n| n.to_string()).collect();
        self
    }

    /// Installs the CRDs, makes the namespaces and starts the controller against a new fake ARM.
    pub async fn start(self, client: &Client) -> Controller {
        crds::ensure_installed(client, &[crds::NODEPOOLS, crds::NODECLAIMS, crds::AKSNODECLASSES]).await;
        for namespace in &self.namespaces {
            objects::namespace(client, namespace).await;
        }
        let registrar = self.registrar.unwrap_or_else(|| Arc::new(KubeNodeRegistrar::new(client.clone())));
        Controller::start_with_fake(cluster::shared(), client, &self.name, &self.env, registrar, self.fake)
            .await
    }
}

/// Applies `class` and `pool` and waits until the controller has marked both Ready.
pub async fn class_and_pool_ready(client: &Client, controller: &Controller, class: &Value, pool: &Value) {
    objects::apply(client, class).await.expect("applying the AKSNodeClass");
    objects::apply(client, pool).await.expect("applying the NodePool");
    let what = format!(
        "the controller to mark AKSNodeClass {} and NodePool {} Ready",
        class["metadata"]["name"].as_str().unwrap_or_default(),
        pool["metadata"]["name"].as_str().unwrap_or_default()
    );
    controller
        .wait_until(&what, READY, || async {
            let (class, pool) = (get_json(client, class).await?, get_json(client, pool).await?);
            if condition_is_true(&class, "Ready") && condition_is_true(&pool, "Ready") {
                Ok(())
            } else {
                Err(format!(
                    "AKSNodeClass conditions: {}; NodePool conditions: {}",
                    conditions_summary(&class),
                    conditions_summary(&pool)
                ))
            }
        })
        .await;
}

/// A wait for `count` Running pods (bound, phase Running, not being deleted) of `selector` in
/// `namespace`; [`RunningPods::wait`] waits.
pub fn running_pods<'a>(
    client: &'a Client,
    namespace: &str,
    selector: &str,
    count: usize,
) -> RunningPods<'a> {
    RunningPods {
        client,
        namespace: namespace.to_string(),
        selector: selector.to_string(),
        count,
        avoid: Vec::new(),
        no_others: false,
        timeout: PODS_RUNNING,
    }
}

/// See [`running_pods`].
pub struct RunningPods<'a> {
    client: &'a Client,
    namespace: String,
    selector: String,
    count: usize,
    avoid: Vec<String>,
    no_others: bool,
    timeout: Duration,
}

impl RunningPods<'_> {
    /// Counts only pods on other nodes than these (replacements of pods that ran there).
    pub fn avoiding(mut self, nodes: &[String]) -> Self {
        self.avoid = nodes.to_vec();
        self
    }

    /// Also waits until no other pod of the selector is left, but those being deleted (a scale-down
    /// has settled).
    pub fn and_no_others(mut self) -> Self {
        self.no_others = true;
        self
    }

    pub fn within(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits until exactly `count` such pods run (failing at once if the controller exits); returns them.
    pub async fn wait(self, controller: &Controller) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let listed = ListParams::default().labels(&self.selector);
        let what = format!("{} pods {} in {} to be Running", self.count, self.selector, self.namespace);
        controller
            .wait_until(&what, self.timeout, || async {
                let all = pods.list(&listed).await.map_err(|err| format!("listing pods: {err}"))?.items;
                let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                let running: Vec<Pod> =
                    all.iter().filter(|p| is_running(p) && !self.avoid.contains(&node(p))).cloned().collect();
                let live = all.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
                if running.len() == self.count && (!self.no_others || live == self.count) {
                    return Ok(running);
                }
                let waiting = all.iter().find(|p| !is_running(p)).map(|p| {
                    let conditions = p.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
                    let unscheduled =
                        conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False");
                    format!(
                        "; e.g. {} {}",
                        p.metadata.name.as_deref().unwrap_or_default(),
                        unscheduled.and_then(|c| c.message.clone()).unwrap_or_else(|| "not Running".into())
                    )
                });
                let mut nodes: Vec<String> = running.iter().map(node).collect();
                nodes.sort();
                nodes.dedup();
                nodes.truncate(10);
                Err(format!(
                    "{} Running (on nodes {nodes:?}, at most 10 shown), {live} pods not being deleted{}",
                    running.len(),
                    waiting.unwrap_or_default()
                ))
            })
            .await
    }
}

/// `Type=Status (reason: message)` for each condition, or `none`.
pub fn conditions_summary(object: &Value) -> String {
    let conditions = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
    if conditions.is_empty() {
        return "none".to_string();
    }
    let text: Vec<String> = conditions
        .iter()
        .map(|c| {
            let detail = [c["reason"].as_str(), c["message"].as_str()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            format!(
                "{}={} ({detail})",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?")
            )
        })
        .collect();
    text.join(", ")
}
