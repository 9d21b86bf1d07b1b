//! The virtual clock and the controllers it drives, tick by tick (10 s, upstream's disruption poll):
//! events due, the ReplicaSet controller, provisioning ([`crate::scheduling::solve`] on the pending
//! pods, as the controller's provisioner), node lifecycle (Ready after the boot delay), forceful
//! expiration, and disruption ([`crate::disruption::decide`], then [`crate::disruption::validate`]
//! 15 s later, then taint, launch the replacements, wait until they are Ready, delete the
//! candidates). Deterministic: the same timeline gives the same run.
//!
//! A pass that found nothing to do is not repeated until the cluster changes or a time-based rule
//! can change its answer: a node's consolidateAfter or a pod's do-not-disrupt duration running out,
//! or a budget window opening or closing (at most an hour later). That keeps a simulated day fast
//! without deciding anything later than the controller would.

use super::above_bound::{pass_causes, PassCauses};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::cluster::{NodeRecord, VirtualCluster};
use super::file::{Action, Timeline};
use super::snapshot::{self, launch_hashes};
use crate::disruption::static_pools::StaticAction;
use crate::disruption::{self, Command, Drifted, Options};
use crate::model::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE};
use crate::model::CapacityType;
use crate::sim::managed;
use crate::sim::scenario::{self, Catalog, ScenarioError};

/// Upstream's disruption poll interval.
const TICK: Duration = Duration::from_secs(10);
/// Upstream `commandValidationDelay`: a decision is re-checked this long after it was made.
const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// How often expiration looks while nothing changes.
const IDLE_PASS: Duration = Duration::from_secs(60);
/// The longest a pass that found nothing is trusted while nothing changes.
const IDLE_LIMIT: Duration = Duration::from_secs(3600);

/// One row of the output: the cluster at a moment.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub offset_seconds: u64,
    pub time: String,
    pub nodes: usize,
    pub nodes_by_pool: BTreeMap<String, usize>,
    pub nodes_by_instance_type: BTreeMap<String, usize>,
    pub nodes_by_capacity_type: BTreeMap<String, usize>,
    pub price_per_hour: f64,
    /// The solver's lower bound for placing every pod of the moment on fresh capacity.
    pub lower_bound_per_hour: f64,
    /// Pods with no node.
    pub pending_pods: usize,
    /// Pods bound to a node that is still booting.
    pub starting_pods: usize,
    pub running_pods: usize,
}

/// What became of a decision.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DecisionRow {
    pub offset_seconds: u64,
    pub time: String,
    /// Empty, Drifted, Underutilized, Expired, Replicas (a static NodePool held at its count), or Event
    /// for a timeline event.
    pub reason: String,
    pub method: String,
    pub candidates: Vec<String>,
    /// Instance types of the replacements.
    pub replacements: Vec<String>,
    pub savings_per_hour: f64,
    pub disruption_cost: f64,
    /// decided, executed, invalid: <why>, applied (events).
    pub outcome: String,
    pub explanation: String,
}

/// The whole run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Run {
    pub samples: Vec<Sample>,
    pub decisions: Vec<DecisionRow>,
    pub pods_evicted: usize,
    pub nodes_launched: usize,
    pub nodes_removed: usize,
    /// What each disruption pass that decided nothing found in the way, when it changed
    /// ([`super::above_bound`]).
    pub passes: Vec<PassCauses>,
}

/// A timeline that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("at {at}: {event}: {message}")]
    Event { at: String, event: String, message: String },
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Load(#[from] crate::sim::load::LoadError),
    #[error(transparent)]
    Managed(#[from] crate::sim::managed::ManagedError),
}

/// What the disruption input depends on: the cluster's fingerprint and which nodes have drifted.
type SnapshotKey = ((u64, u64), BTreeMap<String, Drifted>);

enum InFlight {
    /// Decided at this time; validated [`VALIDATION_DELAY`] later.
    Validating { command: Command, decided: Timestamp },
    /// Candidates tainted, replacements launched (these node names); waiting for them to be Ready.
    Replacing { command: Command, replacements: Vec<String> },
}

struct Engine<'t> {
    timeline: &'t Timeline,
    region: String,
    catalog: Catalog,
    options: Options,
    cluster: VirtualCluster,
    run: Run,
    in_flight: Option<InFlight>,
    drift_since: BTreeMap<String, Timestamp>,
    /// The cluster's fingerprint at the last pass that found nothing, and until when its answer holds.
    idle_since: Option<((u64, u64), Timestamp)>,
    /// The solver input of the cluster at a fingerprint ([`Engine::fingerprint`]).
    scenario: Option<((u64, u64), Rc<scenario::Scenario>)>,
    /// The disruption input at a fingerprint and drift.
    snapshot: Option<(SnapshotKey, Rc<disruption::Snapshot>)>,
    /// The repack lower bound at a cluster version.
    bound: Option<(u64, f64)>,
    /// When expiration last looked, and at which cluster version.
    expiry_checked: Option<(u64, Timestamp)>,
    /// The cluster version after the last provisioning pass: pods it left pending wait for a change.
    provisioned: Option<u64>,
}

/// Runs a timeline.
pub fn run(timeline: &Timeline, region: &str, catalog: Catalog, options: Options) -> Result<Run, RunError> {
    let mut engine = Engine {
        timeline,
        region: region.to_string(),
        catalog,
        options,
        cluster: VirtualCluster::new(&timeline.objects)?,
        run: Run::default(),
        in_flight: None,
        drift_since: BTreeMap::new(),
        idle_since: None,
        scenario: None,
        snapshot: None,
        bound: None,
        expiry_checked: None,
        provisioned: None,
    };
    let start = timeline.settings.start;
    engine.adopt_managed_nodes(start)?;
    let mut next_event = 0;
    let mut offset = Duration::ZERO;
    let mut next_sample = Duration::ZERO;
    while offset <= timeline.settings.duration {
        let now = at(start, offset);
        let mut changed = false;
        while next_event < timeline.events.len() && timeline.events[next_event].at <= offset {
            engine.apply_event(next_event, now)?;
            next_event += 1;
            changed = true;
        }
        engine.cluster.reconcile_workloads(now);
        let decisions_before = engine.run.decisions.len();
        engine.provision(now)?;
        engine.hold_static_pools(now)?;
        engine.expire(now)?;
        engine.disrupt(now)?;
        changed |= engine.run.decisions.len() != decisions_before;
        if offset >= next_sample || changed {
            let sample = engine.sample(offset, now)?;
            engine.run.samples.push(sample);
            while next_sample <= offset {
                next_sample += timeline.settings.sample_every;
            }
        }
        offset += TICK;
    }
    Ok(engine.run)
}

/// Until when a pass that found nothing keeps its answer if the cluster does not change: the first
/// consolidateAfter or do-not-disrupt duration to run out, the next minute a scheduled budget turns
/// on or off, and at most [`IDLE_LIMIT`].
fn answer_holds_until(
    snapshot: &disruption::Snapshot,
    blocked: &[disruption::Blocked],
    now: Timestamp,
) -> Timestamp {
    use crate::apis::nodepool::DisruptionReason;
    use disruption::BlockReason;
    let mut until = at(now, IDLE_LIMIT);
    for b in blocked {
        let left = match &b.reason {
            BlockReason::ConsolidateAfter { left } => Some(*left),
            BlockReason::PodDoNotDisrupt { left, .. } => *left,
            BlockReason::Deferred => Some(Duration::ZERO),
            _ => None,
        };
        if let Some(left) = left {
            until = until.min(at(now, left));
        }
    }
    let scheduled: Vec<&disruption::Budget> =
        snapshot.nodepools.iter().flat_map(|p| p.budgets.iter()).filter(|b| b.window.is_some()).collect();
    if !scheduled.is_empty() {
        let reasons = [DisruptionReason::Empty, DisruptionReason::Drifted, DisruptionReason::Underutilized];
        let state = |t: Timestamp| -> Vec<bool> {
            scheduled.iter().flat_map(|b| reasons.iter().map(move |r| b.applies(*r, t))).collect()
        };
        let now_state = state(now);
        let mut t = now;
        while t < until {
            t = at(t, Duration::from_secs(60));
            if state(t) != now_state {
                until = until.min(t);
                break;
            }
        }
    }
    until
}

fn at(start: Timestamp, offset: Duration) -> Timestamp {
    start.checked_add(SignedDuration::try_from(offset).unwrap_or_default()).unwrap_or(start)
}

fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Engine<'_> {
    fn row(&self, now: Timestamp) -> DecisionRow {
        let offset = now.as_second() - self.timeline.settings.start.as_second();
        DecisionRow {
            offset_seconds: offset.max(0) as u64,
            time: rfc3339(now),
            reason: String::new(),
            method: String::new(),
            candidates: vec![],
            replacements: vec![],
            savings_per_hour: 0.0,
            disruption_cost: 0.0,
            outcome: String::new(),
            explanation: String::new(),
        }
    }

    fn command_row(&self, now: Timestamp, command: &Command, outcome: String) -> DecisionRow {
        DecisionRow {
            reason: disruption::command::reason_str(command.reason).to_string(),
            method: command.method.as_str().to_string(),
            candidates: command.candidates.clone(),
            replacements: command.replacements.iter().map(|r| r.instance_type.clone()).collect(),
            savings_per_hour: command.savings_per_hour,
            disruption_cost: command.disruption_cost,
            outcome,
            explanation: command.explanation.clone(),
            ..self.row(now)
        }
    }

    fn apply_event(&mut self, index: usize, now: Timestamp) -> Result<(), RunError> {
        let event = &self.timeline.events[index];
        let fail = |message: String| RunError::Event {
            at: format!("{}s", event.at.as_secs()),
            event: event.describe.clone(),
            message,
        };
        let mut explanation = String::new();
        match &event.action {
            Action::Scale { deployment, replicas } => {
                if !self.cluster.scale(deployment, *replicas) {
                    return Err(fail(format!("there is no Deployment {deployment} in the timeline")));
                }
            }
            Action::Apply(raw) => self.cluster.apply(raw).map_err(|e| fail(e.to_string()))?,
            Action::Delete { kind, namespace, name } => {
                if !self.cluster.delete(kind, namespace.as_deref(), name) {
                    return Err(fail("no such object".into()));
                }
            }
            Action::EvictSpot { node, count } => {
                let mut spot: Vec<(Timestamp, String)> = self
                    .cluster
                    .nodes
                    .values()
                    .filter(|n| n.capacity_type == crate::model::CapacityType::Spot)
                    .map(|n| (n.launched, n.name.clone()))
                    .collect();
                spot.sort();
                let victims: Vec<String> = match node {
                    Some(n) if spot.iter().any(|(_, s)| s == n) => vec![n.clone()],
                    Some(n) => return Err(fail(format!("{n} is not a spot node of the cluster"))),
                    None => spot.into_iter().take(*count as usize).map(|(_, n)| n).collect(),
                };
                for v in &victims {
                    self.run.pods_evicted += self.cluster.delete_node(v);
                    self.run.nodes_removed += 1;
                }
                explanation = format!("removed {}", victims.join(", "));
            }
        }
        let row = DecisionRow {
            reason: "Event".into(),
            method: "timeline".into(),
            outcome: "applied".into(),
            explanation: if explanation.is_empty() {
                event.describe.clone()
            } else {
                format!("{}: {explanation}", event.describe)
            },
            ..self.row(now)
        };
        self.run.decisions.push(row);
        Ok(())
    }

    /// Nodes of the initial objects labelled with a NodePool are managed from the start, priced at
    /// their offering (instance type, zone and capacity type labels) in the pool's catalog.
    fn adopt_managed_nodes(&mut self, start: Timestamp) -> Result<(), RunError> {
        let scenario = self.scenario(start)?;
        let mut records = vec![];
        for node in &self.cluster.objects.nodes {
            let labels = node.object.metadata.labels.clone().unwrap_or_default();
            let (Some(pool), Some(name)) = (labels.get(LABEL_NODEPOOL), node.object.metadata.name.clone())
            else {
                continue;
            };
            let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
            let (instance_type, zone) = (label(LABEL_INSTANCE_TYPE), label(LABEL_ZONE));
            let capacity_type = match label(LABEL_CAPACITY_TYPE).as_str() {
                "spot" => CapacityType::Spot,
                _ => CapacityType::OnDemand,
            };
            let price = scenario
                .input
                .nodepools
                .iter()
                .filter(|p| &p.name == pool)
                .flat_map(|p| p.instance_types.iter())
                .filter(|t| t.name == instance_type)
                .flat_map(|t| t.offerings.iter())
                .find(|o| o.zone == zone && o.capacity_type == capacity_type)
                .map_or(0.0, |o| o.price);
            let launched = node.object.metadata.creation_timestamp.as_ref().map_or(start, |t| t.0.min(start));
            let hashes = launch_hashes(&self.cluster, pool);
            let record = NodeRecord {
                name: name.clone(),
                nodeclaim: name,
                nodepool: pool.clone(),
                instance_type,
                zone,
                capacity_type,
                price_per_hour: price,
                launched,
                ready_at: launched,
                last_pod_event: launched,
                annotations: hashes,
                disrupting: false,
            };
            records.push(record);
        }
        for record in records {
            self.cluster.adopt(record);
        }
        Ok(())
    }

    /// The solver input of the cluster now, rebuilt only when it changed: the controller's snapshot
    /// of the cluster's objects ([`snapshot::objects_at`]).
    fn scenario(&mut self, now: Timestamp) -> Result<Rc<scenario::Scenario>, RunError> {
        let fingerprint = self.fingerprint(now);
        if let Some((f, s)) = &self.scenario {
            if *f == fingerprint {
                return Ok(s.clone());
            }
        }
        let objects = snapshot::objects_at(&self.cluster, now, &BTreeMap::new());
        let built = Rc::new(scenario::build(&objects, &self.region, &self.catalog)?);
        self.scenario = Some((fingerprint, built.clone()));
        Ok(built)
    }

    /// The disruption input now: the controller's disruption snapshot of the cluster's objects, with
    /// drift as the controller detects it.
    fn snapshot(&mut self, now: Timestamp) -> Result<Rc<disruption::Snapshot>, RunError> {
        let scenario = self.scenario(now)?;
        let drifted = snapshot::drifted(&self.cluster, &scenario.input, now, &mut self.drift_since);
        let key = (self.fingerprint(now), drifted);
        if let Some((k, s)) = &self.snapshot {
            if *k == key {
                return Ok(s.clone());
            }
        }
        let objects = snapshot::objects_at(&self.cluster, now, &key.1);
        let scenario = scenario::build(&objects, &self.region, &self.catalog)?;
        let built = Rc::new(managed::snapshot(&objects, &scenario, &mut vec![])?);
        self.snapshot = Some((key, built.clone()));
        Ok(built)
    }

    /// The provisioner: pending pods are solved for; pods placed on existing (or booting) nodes are
    /// bound, and a node is launched for each planned NodeClaim.
    fn provision(&mut self, now: Timestamp) -> Result<(), RunError> {
        if self.provisioned == Some(self.cluster.version()) || self.cluster.pending_pods().is_empty() {
            return Ok(());
        }
        let scenario = self.scenario(now)?;
        if scenario.input.pods.is_empty() {
            return Ok(());
        }
        let plan = crate::scheduling::solve(&scenario.input);
        for (node, pods) in &plan.existing {
            for pod in pods {
                self.cluster.bind(pod, node, now);
            }
        }
        for claim in &plan.nodeclaims {
            let hashes = launch_hashes(&self.cluster, &claim.nodepool);
            let node = self.cluster.launch(claim, now, self.timeline.settings.boot_delay, hashes);
            self.run.nodes_launched += 1;
            for pod in &claim.pods {
                self.cluster.bind(pod, &node, now);
            }
        }
        self.provisioned = Some(self.cluster.version());
        Ok(())
    }

    /// Static NodePools (`spec.replicas`) held at their counts: launches when a pool is short, removals
    /// when it has more ([`disruption::static_pools::decide`], as the controller's loop).
    fn hold_static_pools(&mut self, now: Timestamp) -> Result<(), RunError> {
        let snapshot = self.snapshot(now)?;
        if snapshot.nodepools.iter().all(|p| p.replicas.is_none()) {
            return Ok(());
        }
        let max_options = snapshot.solve_options.max_instance_type_options;
        for action in disruption::static_pools::decide(&snapshot, now, max_options) {
            let (candidates, explanation) = match action {
                StaticAction::Launch { nodepool, claims } => {
                    let mut launched = vec![];
                    for claim in &claims {
                        let hashes = launch_hashes(&self.cluster, &claim.nodepool);
                        launched.push(self.cluster.launch(
                            claim,
                            now,
                            self.timeline.settings.boot_delay,
                            hashes,
                        ));
                        self.run.nodes_launched += 1;
                    }
                    (launched, format!("static NodePool {nodepool}: launched to reach its replicas"))
                }
                StaticAction::Remove { nodepool, nodeclaims } => {
                    let nodes: Vec<String> = snapshot
                        .nodes
                        .iter()
                        .filter(|n| nodeclaims.contains(&n.nodeclaim))
                        .map(|n| n.node.name.clone())
                        .collect();
                    let mut evicted = 0;
                    for node in &nodes {
                        evicted += self.cluster.delete_node(node);
                        self.run.nodes_removed += 1;
                    }
                    self.run.pods_evicted += evicted;
                    (
                        nodes,
                        format!(
                            "static NodePool {nodepool}: removed over its replicas; {evicted} pod(s) evicted"
                        ),
                    )
                }
                StaticAction::Blocked { .. } => continue,
            };
            let row = DecisionRow {
                reason: "Replicas".into(),
                method: "static".into(),
                candidates,
                outcome: "executed".into(),
                explanation,
                ..self.row(now)
            };
            self.run.decisions.push(row);
        }
        Ok(())
    }

    /// Forceful expiration: the NodeClaim is deleted at creation + expireAfter, without budgets or a
    /// replacement first (upstream v1); its pods come back pending and are provisioned for.
    fn expire(&mut self, now: Timestamp) -> Result<(), RunError> {
        let version = self.cluster.version();
        if let Some((v, when)) = self.expiry_checked {
            if v == version && now < at(when, IDLE_PASS) {
                return Ok(());
            }
        }
        self.expiry_checked = Some((version, now));
        let snapshot = self.snapshot(now)?;
        for expired in disruption::expired(&snapshot, now) {
            let pods = self.cluster.delete_node(&expired.node);
            self.run.pods_evicted += pods;
            self.run.nodes_removed += 1;
            let row = DecisionRow {
                reason: "Expired".into(),
                method: "expiration".into(),
                candidates: vec![expired.node.clone()],
                outcome: "executed".into(),
                explanation: format!("expired at {}; {pods} pod(s) evicted", rfc3339(expired.expired_at)),
                ..self.row(now)
            };
            self.run.decisions.push(row);
        }
        Ok(())
    }

    /// A fingerprint of what decisions depend on apart from time: the objects and which nodes are
    /// Ready.
    fn fingerprint(&self, now: Timestamp) -> (u64, u64) {
        let ready = self.cluster.nodes.values().filter(|n| n.ready(now)).count() as u64;
        (self.cluster.version(), ready)
    }

    fn disrupt(&mut self, now: Timestamp) -> Result<(), RunError> {
        match self.in_flight.take() {
            Some(InFlight::Validating { command, decided }) => {
                if now < at(decided, VALIDATION_DELAY) {
                    self.in_flight = Some(InFlight::Validating { command, decided });
                    return Ok(());
                }
                let snapshot = self.snapshot(now)?;
                if let Err(invalid) = disruption::validate(&command, &snapshot, now, &self.options) {
                    let row = self.command_row(now, &command, format!("invalid: {invalid}"));
                    self.run.decisions.push(row);
                    return Ok(());
                }
                for candidate in &command.candidates {
                    self.cluster.taint_disrupted(candidate);
                }
                let mut replacements = vec![];
                for claim in &command.replacements {
                    let hashes = launch_hashes(&self.cluster, &claim.nodepool);
                    replacements.push(self.cluster.launch(
                        claim,
                        now,
                        self.timeline.settings.boot_delay,
                        hashes,
                    ));
                    self.run.nodes_launched += 1;
                }
                self.in_flight = Some(InFlight::Replacing { command, replacements });
            }
            Some(InFlight::Replacing { command, replacements }) => {
                let waiting =
                    replacements.iter().any(|r| self.cluster.nodes.get(r).is_some_and(|n| !n.ready(now)));
                if waiting {
                    self.in_flight = Some(InFlight::Replacing { command, replacements });
                    return Ok(());
                }
                let mut evicted = 0;
                for candidate in &command.candidates {
                    evicted += self.cluster.delete_node(candidate);
                    self.run.nodes_removed += 1;
                }
                self.run.pods_evicted += evicted;
                let row = self.command_row(now, &command, format!("executed: {evicted} pod(s) moved"));
                self.run.decisions.push(row);
                self.idle_since = None;
            }
            None => {
                let fingerprint = self.fingerprint(now);
                if let Some((seen, until)) = self.idle_since {
                    if seen == fingerprint && now < until {
                        return Ok(());
                    }
                }
                let snapshot = self.snapshot(now)?;
                let decisions = disruption::decide(&snapshot, now, &self.options);
                match decisions.commands.into_iter().next() {
                    Some(command) => {
                        let row = self.command_row(now, &command, "decided".into());
                        self.run.decisions.push(row);
                        self.in_flight = Some(InFlight::Validating { command, decided: now });
                        self.idle_since = None;
                    }
                    None => {
                        self.record_pass(now, &decisions.blocked);
                        self.idle_since =
                            Some((fingerprint, answer_holds_until(&snapshot, &decisions.blocked, now)))
                    }
                }
            }
        }
        Ok(())
    }

    /// Keeps what a pass that decided nothing found in the way, unless the last one found the same.
    fn record_pass(&mut self, now: Timestamp, blocked: &[disruption::Blocked]) {
        let offset = (now.as_second() - self.timeline.settings.start.as_second()).max(0) as u64;
        let pass = pass_causes(offset, blocked);
        if self.run.passes.last().is_none_or(|last| last.causes != pass.causes) {
            self.run.passes.push(pass);
        }
    }

    fn sample(&mut self, offset: Duration, now: Timestamp) -> Result<Sample, RunError> {
        let version = self.cluster.version();
        let lower_bound = match self.bound {
            Some((v, bound)) if v == version => bound,
            _ => {
                let snapshot = self.snapshot(now)?;
                let bound = disruption::repack_lower_bound(&snapshot);
                self.bound = Some((version, bound));
                bound
            }
        };
        let mut sample = Sample {
            offset_seconds: offset.as_secs(),
            time: rfc3339(now),
            nodes: self.cluster.nodes.len(),
            nodes_by_pool: BTreeMap::new(),
            nodes_by_instance_type: BTreeMap::new(),
            nodes_by_capacity_type: BTreeMap::new(),
            price_per_hour: self.cluster.price_per_hour(),
            lower_bound_per_hour: lower_bound,
            pending_pods: self.cluster.pending_pods().len(),
            starting_pods: self.cluster.starting_pods(now),
            running_pods: 0,
        };
        sample.running_pods =
            self.cluster.objects.pods.len().saturating_sub(sample.pending_pods + sample.starting_pods);
        for n in self.cluster.nodes.values() {
            *sample.nodes_by_pool.entry(n.nodepool.clone()).or_default() += 1;
            *sample.nodes_by_instance_type.entry(n.instance_type.clone()).or_default() += 1;
            *sample.nodes_by_capacity_type.entry(n.capacity_type.as_str().to_string()).or_default() += 1;
        }
        Ok(sample)
    }
}
