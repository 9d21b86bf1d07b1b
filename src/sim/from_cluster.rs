//! `simulate --from-cluster`: the objects `simulate` reads, listed from the cluster of the current
//! kubeconfig instead of files. Read-only: one `list` per kind, the RBAC of `kubectl get`. Each kind
//! becomes one `List` source, so the rest of the command is exactly what it does for a snapshot file
//! (`kubectl get ... -o yaml`).

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::Client;
use serde_json::{json, Value};

use super::load::Source;

/// The kinds listed, as (group, version, kind, plural): every kind `simulate` reads
/// ([`super::load::KINDS`]) but `List`.
pub const LISTED: [(&str, &str, &str, &str); 16] = [
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    ("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays"),
    ("karpenter.azure.com", "v1beta1", "AKSNodeClass", "aksnodeclasses"),
    ("", "v1", "Namespace", "namespaces"),
    ("", "v1", "Node", "nodes"),
    ("", "v1", "Pod", "pods"),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("", "v1", "PersistentVolume", "persistentvolumes"),
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "ReplicaSet", "replicasets"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    ("batch", "v1", "Job", "jobs"),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses"),
];

/// Listing the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum FromClusterError {
    #[error("reading the kubeconfig: {0}")]
    Config(String),
    #[error("listing {kind} in the cluster: {source}")]
    List { kind: String, source: kube::Error },
}

/// Connects with the current kubeconfig (or the in-cluster service account).
pub async fn client() -> Result<Client, FromClusterError> {
    Client::try_default().await.map_err(|err| FromClusterError::Config(err.to_string()))
}

/// One source per kind, named `cluster:<Kind>`. A kind whose API the cluster does not serve (a CRD that
/// is not installed, such as NodeOverlay) has no objects.
pub async fn sources(client: &Client) -> Result<Vec<Source>, FromClusterError> {
    let mut out = vec![];
    for (group, version, kind, plural) in LISTED {
        let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.clone(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let listed = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(source) => return Err(FromClusterError::List { kind: kind.into(), source }),
        };
        let items: Vec<Value> = listed.into_iter().map(|o| item(o, &api_version, kind)).collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        out.push(Source::Text { name: format!("cluster:{kind}"), text: list.to_string() });
    }
    Ok(out)
}

/// A listed object as a manifest: its kind and apiVersion (a list's items lack them), without the
/// managed fields nothing here reads.
fn item(object: DynamicObject, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version.into()));
        map.insert("kind".into(), Value::String(kind.into()));
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_simulate_reads_is_listed() {
        let listed: Vec<&str> = LISTED.iter().map(|(_, _, kind, _)| *kind).collect();
        for kind in super::super::load::KINDS.iter().filter(|k| **k != "List") {
            assert!(listed.contains(kind), "{kind} is not listed from the cluster");
        }
    }

    #[test]
    fn a_listed_item_gets_its_kind_and_loses_managed_fields() {
        let object: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "n", "managedFields": [{"manager": "kubelet"}]},
            "status": {"allocatable": {"cpu": "4"}}
        }))
        .unwrap();
        let value = item(object, "v1", "Node");
        assert_eq!(value["kind"], "Node");
        assert_eq!(value["apiVersion"], "v1");
        assert!(value["metadata"].get("managedFields").is_none());
        assert_eq!(value["status"]["allocatable"]["cpu"], "4");
    }
}
