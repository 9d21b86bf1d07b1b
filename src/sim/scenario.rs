//! A scenario's solver input: the controller's snapshot of the scenario's objects ([`index`] loads
//! them into the same cluster index), as the provisioner takes it (with the pods of nodes being
//! deleted), plus the pods of workloads the input has no pods for.
//!
//! Rules, for inputs such as `kubectl get nodes,pods,deploy,rs,nodepools,aksnodeclasses -A -o yaml`:
//! - A workload (Deployment, ReplicaSet, StatefulSet, Job) expands into pending pods only when no Pod
//!   or ReplicaSet in the input names it as owner: then those objects already stand for its pods, and
//!   expanding it as well would count them twice.
//! - Which pods are pending and which run where, DaemonSets, NodePools with their remaining limits:
//!   the index's rules ([`crate::state`]); what a file lacks for them is filled in by [`index`].
//! - Every valid NodePool plans, with its AKSNodeClass's `maxPods` and `osDiskSizeGB` shaping its
//!   instance types (default settings when the class is not in the input).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::index::{self, InputOrder};
use super::load::{Objects, Sourced};
use super::managed::ManagedError;
use crate::apis::validate::ValidationError;
use crate::apis::{AKSNodeClass, NodePool};
use crate::catalog::{self, CapacityOptions, CatalogError, PriceTable, UnavailableOfferings};
use crate::model::InstanceType;
use crate::scheduling::from_k8s::{self, FromK8sError};
use crate::scheduling::{Pod, SolveInput, SolveOptions};
use crate::state::Cluster;

/// An object of the scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    // Boxed: these errors travel through every `?` of the loader, and most runs never build one.
    #[error("{file}: {object}: {error}")]
    Convert { file: String, object: String, error: Box<FromK8sError> },
    #[error("{file}: {object}: {error}")]
    Invalid { file: String, object: String, error: Box<ValidationError> },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// A NodeClaim or PodDisruptionBudget the disruption decisions cannot read.
    #[error(transparent)]
    Managed(#[from] ManagedError),
}

impl ScenarioError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Convert { error, .. } => error.category(),
            Self::Invalid { .. } => "Invalid",
            Self::Catalog(e) => e.category(),
            Self::Managed(e) => e.category(),
        }
    }
}

/// Where instance types come from.
#[derive(Clone, Debug)]
pub enum Catalog {
    /// The embedded Azure catalog for the region, shaped by each NodePool's AKSNodeClass.
    Azure,
    /// A fixed list (`--catalog FILE`), the same for every NodePool.
    Fixed(Arc<Vec<InstanceType>>),
}

/// The solver input of a scenario, with what the reader should know about how it was built and the
/// index it was taken from.
#[derive(Debug)]
pub struct Scenario {
    pub input: SolveInput,
    /// One line each, for the table output.
    pub warnings: Vec<String>,
    /// The scenario's objects in the controller's index.
    pub cluster: Cluster,
    /// The pods of workloads without pods in the input (also in `input.pods`).
    pub expanded: Vec<Pod>,
    types: PoolTypes,
}

impl Scenario {
    /// Each NodePool's instance types, as the controller's catalog gives them to its snapshots.
    pub fn catalog(&self) -> impl Fn(&NodePool, Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> + '_ {
        |_pool, class| self.types.get(class)
    }
}

fn convert<T>(s: &Sourced<T>) -> impl FnOnce(FromK8sError) -> ScenarioError + '_ {
    move |error| ScenarioError::Convert {
        file: s.file.clone(),
        object: s.display.clone(),
        error: Box::new(error),
    }
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// Builds the solver input; pure apart from reading the embedded catalog.
pub fn build(objects: &Objects, region: &str, catalog: &Catalog) -> Result<Scenario, ScenarioError> {
    let mut warnings = vec![];
    let cluster = index::load(objects, &mut warnings)?;
    let types = PoolTypes::new(&cluster, region, catalog)?;
    // Planned NodeClaims are named `<pool>-<n>`: never the name of a Node or NodeClaim of the input.
    let taken = objects.nodes.iter().map(|n| &n.object.metadata.name);
    let taken = taken.chain(objects.nodeclaims.iter().map(|c| &c.object.metadata.name));
    let reserved_names = std::sync::Arc::new(taken.flatten().cloned().collect());
    let options = SolveOptions { region: region.to_string(), reserved_names, ..SolveOptions::default() };
    let mut input = cluster.snapshot(&|_pool, class| types.get(class), options);
    if cluster.node_overlays().next().is_some() {
        let pools: Vec<_> = cluster.ready_nodepools().collect();
        for (name, why) in cluster.overlaid_catalogs(&pools, &|_pool, class| types.get(class)).rejected {
            warnings.push(format!("NodeOverlay/{name}: left out: {why}"));
        }
    }
    input.pods.extend(cluster.pods_of_deleting_nodes());
    let order = InputOrder::new(objects);
    input.nodes.sort_by_key(|n| order.node(&n.name));
    input.pods.sort_by_key(|p| order.pod(p));
    input.running.sort_by_key(|p| order.pod(p));
    let expanded = expand_workloads(objects, &cluster)?;
    input.pods.extend(expanded.iter().cloned().map(Arc::new));
    Ok(Scenario { input, warnings, cluster, expanded, types })
}

/// The AKSNodeClass settings that shape instance types: `maxPods` and `osDiskSizeGB`.
type ClassSettings = (Option<u32>, Option<u32>);

fn settings(class: Option<&AKSNodeClass>) -> ClassSettings {
    class.map_or((None, None), |c| {
        (c.spec.max_pods.map(|m| m as u32), c.spec.os_disk_size_gb.map(|g| g as u32))
    })
}

/// The instance types of the scenario's NodePools: one list per distinct set of node-class settings,
/// or the one fixed list.
#[derive(Debug)]
enum PoolTypes {
    Fixed(Arc<Vec<InstanceType>>),
    BySettings(BTreeMap<ClassSettings, Arc<Vec<InstanceType>>>),
}

impl PoolTypes {
    fn new(cluster: &Cluster, region: &str, catalog: &Catalog) -> Result<Self, ScenarioError> {
        if let Catalog::Fixed(types) = catalog {
            return Ok(Self::Fixed(types.clone()));
        }
        let pricing = PriceTable::static_or_fallback(region);
        let mut by_settings = BTreeMap::new();
        for pool in cluster.nodepools() {
            let key = settings(cluster.nodeclass(&pool.spec.template.spec.node_class_ref.name));
            if by_settings.contains_key(&key) {
                continue;
            }
            let options =
                CapacityOptions { max_pods: key.0, os_disk_size_gb: key.1, ..CapacityOptions::default() };
            let unavailable = UnavailableOfferings::default();
            let types = catalog::instance_types(region, &options, &pricing, &unavailable, Duration::ZERO)?;
            by_settings.insert(key, Arc::new(types));
        }
        Ok(Self::BySettings(by_settings))
    }

    fn get(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
        match self {
            Self::Fixed(types) => types.clone(),
            Self::BySettings(by) => by.get(&settings(class)).cloned().unwrap_or_default(),
        }
    }
}

/// Expands the workloads no Pod or ReplicaSet of the input stands for.
fn expand_workloads(objects: &Objects, cluster: &Cluster) -> Result<Vec<Pod>, ScenarioError> {
    let mut out = vec![];
    let ctx = cluster.pod_context();
    let owned: BTreeSet<(String, String, String)> = objects
        .pods
        .iter()
        .map(|p| &p.object.metadata)
        .chain(objects.replicasets.iter().map(|r| &r.object.metadata))
        .flat_map(|meta| {
            let ns = namespace_of(meta).to_string();
            meta.owner_references.iter().flatten().map(move |o| (ns.clone(), o.kind.clone(), o.name.clone()))
        })
        .collect();
    // `claim_templates`: a StatefulSet's volumeClaimTemplates, whose claims are `<template>-<pod>`.
    let mut expand = |kind: &str,
                      meta: &ObjectMeta,
                      replicas: i32,
                      template: Option<&PodTemplateSpec>,
                      claim_templates: &[String]| {
        let name = meta.name.clone().unwrap_or_default();
        let ns = namespace_of(meta).to_string();
        if owned.contains(&(ns.clone(), kind.to_string(), name.clone())) {
            return Ok(());
        }
        let template = template.cloned().unwrap_or_default();
        let replicas = usize::try_from(replicas).unwrap_or(0);
        let mut pods = from_k8s::template_pods(&template, &ns, kind, &name, replicas, ctx)?;
        if let Some(spec) = &template.spec {
            for pod in &mut pods {
                let mut claims = from_k8s::pod_claims(&pod.name, spec);
                claims.extend(claim_templates.iter().map(|t| format!("{t}-{}", pod.name)));
                pod.volume_zones = cluster.claim_zones(&ns, &claims);
            }
        }
        out.extend(pods);
        Ok(())
    };
    for d in &objects.deployments {
        let spec = d.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        expand("Deployment", &d.object.metadata, replicas, spec.map(|s| &s.template), &[])
            .map_err(convert(d))?;
    }
    for r in &objects.replicasets {
        let spec = r.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        expand("ReplicaSet", &r.object.metadata, replicas, spec.and_then(|s| s.template.as_ref()), &[])
            .map_err(convert(r))?;
    }
    for s in &objects.statefulsets {
        let spec = s.object.spec.as_ref();
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        let claim_templates: Vec<String> = spec
            .and_then(|s| s.volume_claim_templates.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| t.metadata.name.clone())
            .collect();
        expand("StatefulSet", &s.object.metadata, replicas, spec.map(|s| &s.template), &claim_templates)
            .map_err(convert(s))?;
    }
    for j in &objects.jobs {
        let spec = j.object.spec.as_ref();
        // Pods running at once: parallelism (default 1), never more than the completions asked for.
        let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
        let replicas = spec.and_then(|s| s.completions).map_or(parallelism, |c| c.min(parallelism));
        expand("Job", &j.object.metadata, replicas, spec.map(|s| &s.template), &[]).map_err(convert(j))?;
    }
    Ok(out)
}
