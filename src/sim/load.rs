//! Reading a scenario: Kubernetes YAML or JSON files (multi-document, or `List`s such as
//! `kubectl get ... -o yaml` prints) decoded into typed objects, each remembered with its file and a
//! readable name for messages. The only file I/O of the simulator besides `--catalog` and
//! `bench-upstream`'s upstream.json.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::de::DeserializeOwned;

use crate::apis::manifest::{self, ManifestError, RawObject};
use crate::apis::{AKSNodeClass, NodeClaim, NodeOverlay, NodePool};

/// The kinds `simulate` reads. Anything else is refused rather than silently ignored, so a typo in a
/// kind cannot make a scenario look cheaper than it is.
pub const KINDS: [&str; 17] = [
    "NodePool",
    "NodeOverlay",
    "NodeClaim",
    "AKSNodeClass",
    "Pod",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "DaemonSet",
    "Node",
    "PodDisruptionBudget",
    "Namespace",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "List",
];

/// Kinds that never change where pods go or what nodes cost: a snapshot such as `kubectl get all -A -o
/// yaml` is full of them. They are skipped, with one summary warning ([`Objects::skipped`]); a kind in
/// neither list is still refused.
pub const SKIPPED_KINDS: [&str; 33] = [
    "Service",
    "Endpoints",
    "EndpointSlice",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "Ingress",
    "IngressClass",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "CronJob",
    "Event",
    "Lease",
    "ControllerRevision",
    "CustomResourceDefinition",
    "PriorityClass",
    "LimitRange",
    "ResourceQuota",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "CertificateSigningRequest",
    "PodTemplate",
    "FlowSchema",
];

/// A scenario could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{file}: {object}: kind: {kind:?} is not a kind simulate reads ({})", KINDS.join(", "))]
    UnknownKind { file: String, object: String, kind: String },
    #[error("{file}: {object}: metadata.name: is missing")]
    Unnamed { file: String, object: String },
    #[error("{file}: {object}: is defined twice")]
    Duplicate { file: String, object: String },
}

impl LoadError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Manifest(_) => "InvalidManifest",
            Self::UnknownKind { .. } => "UnknownKind",
            Self::Unnamed { .. } => "Unnamed",
            Self::Duplicate { .. } => "Duplicate",
        }
    }
}

/// An object with where it came from.
#[derive(Clone, Debug)]
pub struct Sourced<T> {
    pub file: String,
    /// `Kind/name` or `Kind/namespace/name`.
    pub display: String,
    pub object: T,
}

/// Every object of a scenario, by kind, in file order.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub nodepools: Vec<Sourced<NodePool>>,
    /// Managed capacity, for the disruption decisions (with Nodes labelled `karpenter.sh/nodepool`).
    pub nodeclaims: Vec<Sourced<NodeClaim>>,
    pub nodeclasses: Vec<Sourced<AKSNodeClass>>,
    /// Applied to every pool's instance types, as the controller applies them with the `NodeOverlay`
    /// feature gate on.
    pub node_overlays: Vec<Sourced<NodeOverlay>>,
    pub pods: Vec<Sourced<Pod>>,
    pub deployments: Vec<Sourced<Deployment>>,
    pub replicasets: Vec<Sourced<ReplicaSet>>,
    pub statefulsets: Vec<Sourced<StatefulSet>>,
    pub jobs: Vec<Sourced<Job>>,
    pub daemonsets: Vec<Sourced<DaemonSet>>,
    pub nodes: Vec<Sourced<Node>>,
    /// Their current allowance limits which nodes the disruption decisions may drain.
    pub pdbs: Vec<Sourced<PodDisruptionBudget>>,
    pub namespaces: Vec<Sourced<Namespace>>,
    /// Claims, volumes and storage classes: the zones pods' volumes pin them to.
    pub claims: Vec<Sourced<PersistentVolumeClaim>>,
    pub volumes: Vec<Sourced<PersistentVolume>>,
    pub storage_classes: Vec<Sourced<StorageClass>>,
    /// Objects of [`SKIPPED_KINDS`] that were left out, counted by kind.
    pub skipped: std::collections::BTreeMap<String, usize>,
}

impl Objects {
    /// The one warning that names what was skipped, if anything was.
    pub fn skipped_warning(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let total: usize = self.skipped.values().sum();
        let kinds: Vec<String> = self.skipped.iter().map(|(kind, n)| format!("{kind} ({n})")).collect();
        Some(format!(
            "skipped {total} object(s) of kinds that do not affect scheduling: {}",
            kinds.join(", ")
        ))
    }
}

/// Where the text of a scenario comes from.
#[derive(Clone, Debug)]
pub enum Source {
    File(PathBuf),
    /// Text already in memory (the built-in demo), with the name used in messages.
    Text {
        name: String,
        text: String,
    },
}

/// Reads and decodes every source; all-or-nothing.
pub fn load(sources: &[Source]) -> Result<Objects, LoadError> {
    let mut objects = Objects::default();
    let mut seen = BTreeSet::new();
    for source in sources {
        let (file, raws) = match source {
            Source::File(path) => (path.display().to_string(), manifest::read_objects(path)?),
            Source::Text { name, text } => (name.clone(), manifest::parse_objects(name, text)?),
        };
        for raw in raws {
            add(&mut objects, &file, &raw, &mut seen)?;
        }
    }
    Ok(objects)
}

fn add(
    objects: &mut Objects,
    file: &str,
    raw: &RawObject,
    seen: &mut BTreeSet<String>,
) -> Result<(), LoadError> {
    if SKIPPED_KINDS.contains(&raw.kind.as_str()) {
        *objects.skipped.entry(raw.kind.clone()).or_default() += 1;
        return Ok(());
    }
    if !KINDS.contains(&raw.kind.as_str()) {
        return Err(LoadError::UnknownKind {
            file: file.into(),
            object: raw.display.clone(),
            kind: raw.kind.clone(),
        });
    }
    if raw.kind == "List" {
        // The manifest reader expands `List`s; one reaching here has no items.
        return Ok(());
    }
    let name = raw.value.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default();
    if name.is_empty() {
        return Err(LoadError::Unnamed { file: file.into(), object: raw.display.clone() });
    }
    if !seen.insert(raw.display.clone()) {
        return Err(LoadError::Duplicate { file: file.into(), object: raw.display.clone() });
    }
    fn decode<T: DeserializeOwned>(file: &str, raw: &RawObject) -> Result<Sourced<T>, LoadError> {
        Ok(Sourced { file: file.into(), display: raw.display.clone(), object: raw.decode(file)? })
    }
    match raw.kind.as_str() {
        "NodePool" => objects.nodepools.push(decode(file, raw)?),
        "NodeClaim" => objects.nodeclaims.push(decode(file, raw)?),
        "AKSNodeClass" => objects.nodeclasses.push(decode(file, raw)?),
        "NodeOverlay" => objects.node_overlays.push(decode(file, raw)?),
        "Pod" => objects.pods.push(decode(file, raw)?),
        "Deployment" => objects.deployments.push(decode(file, raw)?),
        "ReplicaSet" => objects.replicasets.push(decode(file, raw)?),
        "StatefulSet" => objects.statefulsets.push(decode(file, raw)?),
        "Job" => objects.jobs.push(decode(file, raw)?),
        "DaemonSet" => objects.daemonsets.push(decode(file, raw)?),
        "Node" => objects.nodes.push(decode(file, raw)?),
        "PodDisruptionBudget" => objects.pdbs.push(decode(file, raw)?),
        "Namespace" => objects.namespaces.push(decode(file, raw)?),
        "PersistentVolumeClaim" => objects.claims.push(decode(file, raw)?),
        "PersistentVolume" => objects.volumes.push(decode(file, raw)?),
        "StorageClass" => objects.storage_classes.push(decode(file, raw)?),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(yaml: &str) -> Result<Objects, LoadError> {
        load(&[Source::Text { name: "t.yaml".into(), text: yaml.into() }])
    }

    #[test]
    fn reads_lists_and_multiple_documents() {
        let objects = text(
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: []}}
---
apiVersion: v1\nkind: Node\nmetadata: {name: n}",
        )
        .unwrap();
        assert_eq!((objects.pods.len(), objects.nodes.len()), (1, 1));
        assert_eq!(objects.pods[0].display, "Pod/a");
        assert_eq!(text("apiVersion: v1\nkind: List\n").unwrap().pods.len(), 0);
    }

    #[test]
    fn skips_kinds_that_do_not_affect_scheduling_with_one_warning() {
        let objects = text(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: t}
---
apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n}",
        )
        .unwrap();
        assert_eq!(objects.nodes.len(), 1);
        let warning = objects.skipped_warning().expect("a warning");
        assert_eq!(
            warning,
            "skipped 3 object(s) of kinds that do not affect scheduling: ConfigMap (1), Service (2)"
        );
        assert_eq!(text("kind: Node\nmetadata: {name: n}").unwrap().skipped_warning(), None);
    }

    #[test]
    fn refuses_unknown_kinds_and_duplicates() {
        let err = text("apiVersion: v1\nkind: Deploymnet\nmetadata: {name: s}").unwrap_err();
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(err.to_string().starts_with("t.yaml: Deploymnet/s: kind: \"Deploymnet\""), "{err}");
        let err = text("kind: Node\nmetadata: {name: n}\n---\nkind: Node\nmetadata: {name: n}").unwrap_err();
        assert_eq!(err.category(), "Duplicate");
    }

    #[test]
    fn decoding_errors_name_the_field() {
        let err =
            text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: 3, ports: x}]}")
                .unwrap_err();
        assert!(err.to_string().contains("Pod/a: spec.containers"), "{err}");
    }
}
