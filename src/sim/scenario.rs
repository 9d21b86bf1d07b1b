//! Turning a scenario's objects into one [`SolveInput`]: which pods are pending and which run where,
//! which workloads stand for pods not in the input, the NodePools with their instance types and
//! remaining limits, and the DaemonSets every new node pays for.
//!
//! Rules, for inputs such as `kubectl get nodes,pods,deploy,rs,nodepools,aksnodeclasses -A -o yaml`:
//! - A workload (Deployment, ReplicaSet, StatefulSet, Job) expands into pending pods only when no Pod
//!   or ReplicaSet in the input names it as owner: then those objects already stand for its pods, and
//!   expanding it as well would count them twice.
//! - A Pod with `spec.nodeName` runs on that node; one whose node is not in the input is left out with
//!   a warning. Succeeded and Failed pods are left out. Pending pods owned by a DaemonSet are left out:
//!   the DaemonSet controller places them, and new nodes already pay for each DaemonSet.
//! - A NodePool whose AKSNodeClass is not in the input uses the default node-class settings, with a
//!   warning. Its `remaining` limits subtract the capacity of the Nodes labelled with its name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::load::{Objects, Sourced};
use crate::apis::validate::{self, ValidationError};
use crate::catalog::{self, CapacityOptions, CatalogError, PriceTable, UnavailableOfferings};
use crate::model::resources::Resources;
use crate::model::InstanceType;
use crate::scheduling::from_k8s::{self, FromK8sError, PodContext, VolumeIndex};
use crate::scheduling::{SolveInput, SolveOptions};

/// The label the API server puts on every namespace.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

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
}

impl ScenarioError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Convert { error, .. } => error.category(),
            Self::Invalid { .. } => "Invalid",
            Self::Catalog(e) => e.category(),
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

/// The solver input of a scenario, with what the reader should know about how it was built.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub input: SolveInput,
    /// One line each, for the table output.
    pub warnings: Vec<String>,
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
    let ctx = pod_context(objects);
    let volumes = volume_index(objects);
    let mut input = SolveInput {
        options: SolveOptions { region: region.to_string(), ..SolveOptions::default() },
        ..SolveInput::default()
    };
    for n in &objects.nodes {
        input.nodes.push(from_k8s::node(&n.object).map_err(convert(n))?);
    }
    let node_names: BTreeSet<&str> = input.nodes.iter().map(|n| n.name.as_str()).collect();
    for p in &objects.pods {
        let phase = p.object.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let mut pod = from_k8s::from_pod(&p.object, &ctx).map_err(convert(p))?;
        if let Some(spec) = &p.object.spec {
            pod.volume_zones = volumes.zones(&pod.namespace, &from_k8s::pod_claims(&pod.name, spec));
        }
        match &pod.node_name {
            Some(node) if node_names.contains(node.as_str()) => input.running.push(pod),
            Some(node) => warnings
                .push(format!("{}: runs on node {node:?}, which is not in the input; left out", p.display)),
            None if pod.owner.as_deref().is_some_and(|o| o.starts_with("DaemonSet/")) => {}
            None => input.pods.push(pod),
        }
    }
    expand_workloads(objects, &ctx, &volumes, &mut input)?;
    for d in &objects.daemonsets {
        let template = &d.object.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let name = d.object.metadata.name.as_deref().unwrap_or_default();
        let ns = namespace_of(&d.object.metadata);
        let pods = from_k8s::template_pods(template, ns, "DaemonSet", name, 1, &ctx).map_err(convert(d))?;
        input.daemonsets.extend(pods);
    }
    nodepools(objects, region, catalog, &mut input, &mut warnings)?;
    Ok(Scenario { input, warnings })
}

/// The input's claims, volumes and storage classes, for the zones pods' volumes allow.
fn volume_index(objects: &Objects) -> VolumeIndex {
    let mut index = VolumeIndex::new();
    objects.claims.iter().for_each(|c| index.apply_claim(&c.object));
    objects.volumes.iter().for_each(|v| index.apply_volume(&v.object));
    objects.storage_classes.iter().for_each(|c| index.apply_class(&c.object));
    index
}

/// Namespaces of the input with their labels, for `namespaceSelector`.
fn pod_context(objects: &Objects) -> PodContext {
    let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let metas = objects
        .pods
        .iter()
        .map(|p| &p.object.metadata)
        .chain(objects.deployments.iter().map(|d| &d.object.metadata))
        .chain(objects.replicasets.iter().map(|d| &d.object.metadata))
        .chain(objects.statefulsets.iter().map(|d| &d.object.metadata))
        .chain(objects.jobs.iter().map(|d| &d.object.metadata))
        .chain(objects.daemonsets.iter().map(|d| &d.object.metadata));
    for meta in metas {
        namespaces.entry(namespace_of(meta).to_string()).or_default();
    }
    for ns in &objects.namespaces {
        let name = ns.object.metadata.name.clone().unwrap_or_default();
        namespaces.entry(name).or_default().extend(ns.object.metadata.labels.clone().unwrap_or_default());
    }
    for (name, labels) in &mut namespaces {
        labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.clone());
    }
    PodContext { namespaces }
}

/// Expands the workloads no Pod or ReplicaSet of the input stands for.
fn expand_workloads(
    objects: &Objects,
    ctx: &PodContext,
    volumes: &VolumeIndex,
    input: &mut SolveInput,
) -> Result<(), ScenarioError> {
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
                pod.volume_zones = volumes.zones(&ns, &claims);
            }
        }
        input.pods.extend(pods);
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
    Ok(())
}

/// The AKSNodeClass settings that shape instance types: `maxPods` and `osDiskSizeGB`.
type ClassSettings = (Option<u32>, Option<u32>);

/// Validates NodePools and AKSNodeClasses and builds the pools, sharing one instance-type list per
/// distinct set of node-class settings.
fn nodepools(
    objects: &Objects,
    region: &str,
    catalog: &Catalog,
    input: &mut SolveInput,
    warnings: &mut Vec<String>,
) -> Result<(), ScenarioError> {
    let invalid = |file: &str, object: &str| {
        let (file, object) = (file.to_string(), object.to_string());
        move |error| ScenarioError::Invalid { file, object, error: Box::new(error) }
    };
    let mut classes = BTreeMap::new();
    for c in &objects.nodeclasses {
        validate::aksnodeclass(&c.object).map_err(invalid(&c.file, &c.display))?;
        classes.insert(c.object.metadata.name.clone().unwrap_or_default(), &c.object);
    }
    let mut used: BTreeMap<String, Resources> = BTreeMap::new();
    for n in &objects.nodes {
        let labels = n.object.metadata.labels.as_ref();
        if let Some(pool) = labels.and_then(|l| l.get(crate::model::labels::LABEL_NODEPOOL)) {
            let capacity = from_k8s::node_capacity(&n.object).map_err(convert(n))?;
            used.entry(pool.clone()).or_default().add_assign(&capacity);
        }
    }
    let pricing = PriceTable::static_or_fallback(region);
    let mut by_options: BTreeMap<ClassSettings, Arc<Vec<InstanceType>>> = BTreeMap::new();
    let mut pools = vec![];
    for p in &objects.nodepools {
        validate::nodepool(&p.object).map_err(invalid(&p.file, &p.display))?;
        let class_name = &p.object.spec.template.spec.node_class_ref.name;
        let mut options = CapacityOptions::default();
        match classes.get(class_name) {
            Some(class) => {
                options.max_pods = class.spec.max_pods.map(|m| m as u32);
                options.os_disk_size_gb = class.spec.os_disk_size_gb.map(|g| g as u32);
            }
            None => warnings.push(format!(
                "{}: AKSNodeClass {class_name:?} is not in the input; using the default node-class settings",
                p.display
            )),
        }
        let types = match catalog {
            Catalog::Fixed(types) => types.clone(),
            Catalog::Azure => match by_options.get(&(options.max_pods, options.os_disk_size_gb)) {
                Some(types) => types.clone(),
                None => {
                    let unavailable = UnavailableOfferings::default();
                    let types = Arc::new(catalog::instance_types(
                        region,
                        &options,
                        &pricing,
                        &unavailable,
                        Duration::ZERO,
                    )?);
                    by_options.insert((options.max_pods, options.os_disk_size_gb), types.clone());
                    types
                }
            },
        };
        let name = p.object.metadata.name.clone().unwrap_or_default();
        let pool_used = used.get(&name).cloned().unwrap_or_default();
        pools.push(from_k8s::nodepool(&p.object, &pool_used, types).map_err(convert(p))?);
    }
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    input.nodepools = pools;
    Ok(())
}
