//! Pods and pod templates to solver [`Pod`]s: effective requests (the Kubernetes init-container and
//! sidecar rule, pod overhead, pod-level resources), node affinity merged with the nodeSelector,
//! tolerations, topology spread, pod (anti-)affinity and host ports. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;

use super::{label_selector, operator, owner_of, resource_list, FromK8sError};
use crate::model::requirements::{Requirement, Requirements};
use crate::model::resources::{Resources, PODS};
use crate::scheduling::input::{
    HostPort, Pod, PodAffinityTerm, Toleration, TolerationOperator, TopologySpread, Weighted,
    WhenUnsatisfiable,
};

/// What the conversion needs to know beyond the pod itself.
#[derive(Clone, Debug, Default)]
pub struct PodContext {
    /// Every namespace of the input with its labels, for `namespaceSelector` in pod (anti-)affinity.
    /// The loader gives each namespace at least `kubernetes.io/metadata.name`, as the API server does.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

/// A pod's identity and spec, from a Pod or from a workload's template.
#[derive(Clone, Copy, Debug)]
pub struct PodSource<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub spec: &'a core::PodSpec,
    /// `Kind/name` of the owning controller.
    pub owner: Option<&'a str>,
    /// Where `spec` sits in its object, for messages: `spec` or `spec.template.spec`.
    pub spec_field: &'a str,
}

/// A Pod object as a solver pod (pending, or running when `spec.nodeName` is set).
pub fn from_pod(p: &core::Pod, ctx: &PodContext) -> Result<Pod, FromK8sError> {
    let empty_spec = core::PodSpec::default();
    let labels = p.metadata.labels.clone().unwrap_or_default();
    let owner = owner_of(p.metadata.owner_references.as_ref());
    pod(
        &PodSource {
            namespace: p.metadata.namespace.as_deref().unwrap_or("default"),
            name: p.metadata.name.as_deref().unwrap_or_default(),
            labels: &labels,
            spec: p.spec.as_ref().unwrap_or(&empty_spec),
            owner: owner.as_deref(),
            spec_field: "spec",
        },
        ctx,
    )
}

/// `replicas` pending pods from a workload's template, named `<workload>-<i>`, owned by
/// `owner_kind/workload`. The template is converted once.
pub fn template_pods(
    template: &core::PodTemplateSpec,
    namespace: &str,
    owner_kind: &str,
    workload: &str,
    replicas: usize,
    ctx: &PodContext,
) -> Result<Vec<Pod>, FromK8sError> {
    let spec =
        template.spec.as_ref().ok_or_else(|| FromK8sError::invalid("spec.template.spec", "is missing"))?;
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let owner = format!("{owner_kind}/{workload}");
    let first = format!("{workload}-0");
    let source = PodSource {
        namespace,
        name: &first,
        labels: &labels,
        spec,
        owner: Some(&owner),
        spec_field: "spec.template.spec",
    };
    let model = pod(&source, ctx)?;
    Ok((0..replicas).map(|i| Pod { name: format!("{workload}-{i}"), ..model.clone() }).collect())
}

/// Converts one pod. A bound pod (`spec.nodeName`) keeps its node affinity for when disruption moves
/// it elsewhere, but never fails on it: where it stays, the affinity is IgnoredDuringExecution, and
/// DaemonSet pods pin their node with `matchFields`, which is not supported for pending pods (such a
/// bound pod keeps no node affinity; DaemonSet pods are never moved).
pub fn pod(src: &PodSource, ctx: &PodContext) -> Result<Pod, FromK8sError> {
    let spec = src.spec;
    let at = |rest: &str| format!("{}.{rest}", src.spec_field);
    let node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    let node_affinity = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref());
    let required = required_terms(src.spec_field, spec.node_selector.as_ref(), node_affinity);
    let preferred = preferred_terms(src.spec_field, node_affinity);
    let (mut required_terms, mut preferred_terms) = match node_name {
        Some(_) => (required.unwrap_or_default(), preferred.unwrap_or_default()),
        None => (required?, preferred?),
    };
    // The pod keeps these as long as it exists: without the room they were built with.
    required_terms
        .iter_mut()
        .chain(preferred_terms.iter_mut().map(|w| &mut w.term))
        .for_each(Requirements::shrink_to_fit);
    let affinity = spec.affinity.as_ref();
    let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
    let pod_anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    let terms = |field: &str, list: Option<&Vec<core::PodAffinityTerm>>| {
        required_affinity(&at(field), list, src, ctx)
    };
    let weighted = |field: &str, list: Option<&Vec<core::WeightedPodAffinityTerm>>| {
        preferred_affinity(&at(field), list, src, ctx)
    };
    Ok(Pod {
        namespace: src.namespace.to_string(),
        name: src.name.to_string(),
        labels: src.labels.clone().into(),
        requests: pod_requests(src.spec_field, spec)?,
        required_terms,
        preferred_terms,
        tolerations: tolerations(src.spec_field, spec)?.into(),
        topology_spread: topology_spread(src.spec_field, spec, src.labels)?,
        affinity: terms(
            "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            pod_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        anti_affinity: terms(
            "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            pod_anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        preferred_affinity: weighted(
            "affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            pod_affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        preferred_anti_affinity: weighted(
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            pod_anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        host_ports: host_ports(src.spec_field, spec)?,
        volume_zones: None,
        node_name,
        owner: src.owner.map(std::sync::Arc::from),
    })
}

/// What a container asks for. As the API server defaults it, a resource with a limit and no request
/// requests its limit.
fn container_requests(field: &str, c: &core::Container) -> Result<Resources, FromK8sError> {
    let resources = c.resources.as_ref();
    let mut requests =
        resource_list(&format!("{field}.resources.requests"), resources.and_then(|r| r.requests.as_ref()))?;
    let limits =
        resource_list(&format!("{field}.resources.limits"), resources.and_then(|r| r.limits.as_ref()))?;
    for (name, amount) in limits.iter() {
        if !requests.iter().any(|(n, _)| n == name) {
            requests.set(name, amount);
        }
    }
    Ok(requests)
}

/// A pod's effective requests, as the scheduler computes them (k8s `resourcehelper.PodRequests`):
/// the sum of the containers and the restartable ("sidecar") init containers, or the largest
/// one-shot init container plus the sidecars started before it, whichever is larger per resource;
/// pod-level `spec.resources` replaces the aggregate for the resources it names; then `spec.overhead`
/// and `pods: 1`.
pub fn pod_requests(spec_field: &str, spec: &core::PodSpec) -> Result<Resources, FromK8sError> {
    let mut total = Resources::new();
    for (i, c) in spec.containers.iter().enumerate() {
        total.add_assign(&container_requests(&format!("{spec_field}.containers[{i}]"), c)?);
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let requests = container_requests(&format!("{spec_field}.initContainers[{i}]"), c)?;
        let while_running = if c.restart_policy.as_deref() == Some("Always") {
            total.add_assign(&requests);
            sidecars.add_assign(&requests);
            sidecars.clone()
        } else {
            requests.add(&sidecars)
        };
        init_peak = init_peak.max(&while_running);
    }
    let mut out = total.max(&init_peak);
    if let Some(pod_level) = spec.resources.as_ref() {
        let pod_level = container_requests(
            &format!("{spec_field}.resources"),
            &core::Container { resources: Some(pod_level.clone()), ..Default::default() },
        )?;
        for (name, amount) in pod_level.iter() {
            out.set(name, amount);
        }
    }
    out.add_assign(&resource_list(&format!("{spec_field}.overhead"), spec.overhead.as_ref())?);
    out.set(PODS, out.get(PODS) + 1);
    Ok(out)
}

/// A pod's effective limits (k8s `resourcehelper.PodLimits`), as upstream's node metrics sum them:
/// the containers and sidecars, or the largest one-shot init container plus the sidecars before it,
/// per resource; pod-level `spec.resources.limits` replaces what it names; `spec.overhead` is added to
/// the resources that have a limit. Quantities that do not parse count as absent (the pod's requests
/// were already checked when it was read).
pub fn pod_limits(spec: &core::PodSpec) -> Resources {
    let limits = |r: Option<&core::ResourceRequirements>| {
        resource_list("", r.and_then(|r| r.limits.as_ref())).unwrap_or_default()
    };
    let mut total = Resources::new();
    for c in &spec.containers {
        total.add_assign(&limits(c.resources.as_ref()));
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let own = limits(c.resources.as_ref());
        let while_running = if c.restart_policy.as_deref() == Some("Always") {
            total.add_assign(&own);
            sidecars.add_assign(&own);
            sidecars.clone()
        } else {
            own.add(&sidecars)
        };
        init_peak = init_peak.max(&while_running);
    }
    let mut out = total.max(&init_peak);
    for (name, amount) in limits(spec.resources.as_ref()).iter() {
        out.set(name, amount);
    }
    let overhead = resource_list("", spec.overhead.as_ref()).unwrap_or_default();
    for (name, amount) in overhead.iter() {
        if out.get(name) > 0 {
            out.set(name, out.get(name) + amount);
        }
    }
    out
}

/// One node selector term; `matchFields` (selection by node name) cannot be expressed as labels.
fn node_selector_term(field: &str, term: &core::NodeSelectorTerm) -> Result<Requirements, FromK8sError> {
    if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(FromK8sError::Unsupported {
            field: format!("{field}.matchFields"),
            message: "node affinity by node fields (matchFields)".into(),
        });
    }
    let mut out = Requirements::new();
    for (i, e) in term.match_expressions.iter().flatten().enumerate() {
        let field = format!("{field}.matchExpressions[{i}]");
        let op = operator(&format!("{field}.operator"), &e.operator)?;
        let values = e.values.clone().unwrap_or_default();
        let requirement = Requirement::from_operator(&e.key, op, &values, None)
            .map_err(|source| FromK8sError::Requirement { field, source })?;
        out.add(requirement);
    }
    Ok(out)
}

/// Required node affinity with the nodeSelector merged into every term (terms are OR'd, the
/// nodeSelector is AND'ed with all of them). An empty term matches no node, so it is dropped; a
/// selector left with no term at all could never be met and is refused.
fn required_terms(
    spec_field: &str,
    node_selector: Option<&BTreeMap<String, String>>,
    affinity: Option<&core::NodeAffinity>,
) -> Result<Vec<Requirements>, FromK8sError> {
    let selector = Requirements::from_labels(node_selector.into_iter().flatten());
    let Some(required) =
        affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return Ok(if selector.is_empty() { vec![] } else { vec![selector] });
    };
    let field = format!(
        "{spec_field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    );
    let mut terms = vec![];
    for (i, term) in required.node_selector_terms.iter().enumerate() {
        let requirements = node_selector_term(&format!("{field}[{i}]"), term)?;
        if !requirements.is_empty() {
            terms.push(requirements.intersect(&selector));
        }
    }
    if terms.is_empty() {
        return Err(FromK8sError::invalid(field, "no term with a matchExpressions entry: no node can match"));
    }
    Ok(terms)
}

/// Preferred node-affinity terms, heaviest first (stable for equal weights).
fn preferred_terms(
    spec_field: &str,
    affinity: Option<&core::NodeAffinity>,
) -> Result<Vec<Weighted<Requirements>>, FromK8sError> {
    let field = format!("{spec_field}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution");
    let mut out = vec![];
    let preferred = affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
    for (i, p) in preferred.into_iter().flatten().enumerate() {
        let term = node_selector_term(&format!("{field}[{i}].preference"), &p.preference)?;
        if !term.is_empty() {
            out.push(Weighted { weight: p.weight, term });
        }
    }
    out.sort_by_key(|w| std::cmp::Reverse(w.weight));
    Ok(out)
}

fn tolerations(spec_field: &str, spec: &core::PodSpec) -> Result<Vec<Toleration>, FromK8sError> {
    let mut out = Vec::with_capacity(spec.tolerations.as_ref().map_or(0, Vec::len));
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let field = format!("{spec_field}.tolerations[{i}]");
        let operator = match t.operator.as_deref().unwrap_or("") {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => {
                return Err(FromK8sError::invalid(
                    format!("{field}.operator"),
                    format!("unknown operator {other:?}"),
                ))
            }
        };
        let effect = match t.effect.as_deref().unwrap_or("") {
            "" => None,
            name => Some(
                super::taint(&field, &core::Taint { effect: name.to_string(), ..Default::default() })?.effect,
            ),
        };
        out.push(Toleration {
            key: t.key.clone().filter(|k| !k.is_empty()),
            operator,
            value: t.value.clone(),
            effect,
        });
    }
    Ok(out)
}

/// Topology spread constraints. `matchLabelKeys` adds `key In [the pod's value]` for each key the pod
/// carries (the API server merges them the same way). A constraint without `labelSelector` counts no
/// pods, so it can never be violated and is dropped. `nodeAffinityPolicy` and `nodeTaintsPolicy` keep
/// their defaults (Honor and Ignore).
fn topology_spread(
    spec_field: &str,
    spec: &core::PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<TopologySpread>, FromK8sError> {
    let mut out = vec![];
    for (i, c) in spec.topology_spread_constraints.iter().flatten().enumerate() {
        let field = format!("{spec_field}.topologySpreadConstraints[{i}]");
        let Some(selector) = &c.label_selector else { continue };
        let mut selector = label_selector(&format!("{field}.labelSelector"), selector)?;
        for key in c.match_label_keys.iter().flatten() {
            if let Some(value) = labels.get(key) {
                selector.add(Requirement::is_in(key, [value.clone()]));
            }
        }
        let max_skew = u32::try_from(c.max_skew)
            .ok()
            .filter(|s| *s >= 1)
            .ok_or_else(|| FromK8sError::invalid(format!("{field}.maxSkew"), "must be at least 1"))?;
        let min_domains =
            match c.min_domains {
                None => None,
                Some(m) => Some(u32::try_from(m).ok().filter(|m| *m >= 1).ok_or_else(|| {
                    FromK8sError::invalid(format!("{field}.minDomains"), "must be at least 1")
                })?),
            };
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(FromK8sError::invalid(
                    format!("{field}.whenUnsatisfiable"),
                    format!("{other:?} is neither DoNotSchedule nor ScheduleAnyway"),
                ))
            }
        };
        out.push(TopologySpread {
            topology_key: c.topology_key.clone(),
            max_skew,
            min_domains,
            when_unsatisfiable,
            selector,
        });
    }
    Ok(out)
}

/// One pod (anti-)affinity term. `matchLabelKeys` / `mismatchLabelKeys` add `In` / `NotIn` the pod's own
/// value. Namespaces: those listed plus those `namespaceSelector` selects among the input's namespaces
/// (`{}` selects all of them); neither given means the pod's own namespace. A term without
/// `labelSelector` selects no pod and is dropped.
fn affinity_term(
    field: &str,
    term: &core::PodAffinityTerm,
    src: &PodSource,
    ctx: &PodContext,
) -> Result<Option<PodAffinityTerm>, FromK8sError> {
    let Some(selector) = &term.label_selector else { return Ok(None) };
    let mut selector = label_selector(&format!("{field}.labelSelector"), selector)?;
    for key in term.match_label_keys.iter().flatten() {
        if let Some(value) = src.labels.get(key) {
            selector.add(Requirement::is_in(key, [value.clone()]));
        }
    }
    for key in term.mismatch_label_keys.iter().flatten() {
        if let Some(value) = src.labels.get(key) {
            selector.add(Requirement::not_in(key, [value.clone()]));
        }
    }
    let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
    match &term.namespace_selector {
        Some(ns_selector) => {
            let wanted = label_selector(&format!("{field}.namespaceSelector"), ns_selector)?;
            namespaces
                .extend(ctx.namespaces.iter().filter(|(_, l)| wanted.matches(*l)).map(|(n, _)| n.clone()));
        }
        None if namespaces.is_empty() => {
            namespaces.insert(src.namespace.to_string());
        }
        None => {}
    }
    Ok(Some(PodAffinityTerm {
        selector,
        namespaces: namespaces.into_iter().collect(),
        topology_key: term.topology_key.clone(),
    }))
}

fn required_affinity(
    field: &str,
    terms: Option<&Vec<core::PodAffinityTerm>>,
    src: &PodSource,
    ctx: &PodContext,
) -> Result<Vec<PodAffinityTerm>, FromK8sError> {
    let mut out = vec![];
    for (i, term) in terms.into_iter().flatten().enumerate() {
        out.extend(affinity_term(&format!("{field}[{i}]"), term, src, ctx)?);
    }
    Ok(out)
}

fn preferred_affinity(
    field: &str,
    terms: Option<&Vec<core::WeightedPodAffinityTerm>>,
    src: &PodSource,
    ctx: &PodContext,
) -> Result<Vec<Weighted<PodAffinityTerm>>, FromK8sError> {
    let mut out = vec![];
    for (i, w) in terms.into_iter().flatten().enumerate() {
        let field = format!("{field}[{i}].podAffinityTerm");
        if let Some(term) = affinity_term(&field, &w.pod_affinity_term, src, ctx)? {
            out.push(Weighted { weight: w.weight, term });
        }
    }
    out.sort_by_key(|w| std::cmp::Reverse(w.weight));
    Ok(out)
}

/// Host ports bound by containers and init containers (the scheduler's NodePorts plugin counts both);
/// protocol defaults to TCP and host IP to "" (every address). Sorted and deduplicated.
fn host_ports(spec_field: &str, spec: &core::PodSpec) -> Result<Vec<HostPort>, FromK8sError> {
    let containers = spec.containers.iter().enumerate().map(|(i, c)| (format!("containers[{i}]"), c));
    let init =
        spec.init_containers.iter().flatten().enumerate().map(|(i, c)| (format!("initContainers[{i}]"), c));
    let mut out = BTreeSet::new();
    for (name, c) in containers.chain(init) {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let Some(port) = p.host_port.filter(|p| *p != 0) else { continue };
            let port = u16::try_from(port).ok().filter(|p| *p != 0).ok_or_else(|| {
                FromK8sError::invalid(
                    format!("{spec_field}.{name}.ports[{j}].hostPort"),
                    format!("{port} is not a port number"),
                )
            })?;
            out.insert(HostPort {
                port,
                protocol: p.protocol.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "TCP".into()),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    Ok(out.into_iter().collect())
}
