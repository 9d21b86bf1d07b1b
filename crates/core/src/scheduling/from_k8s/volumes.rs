//! The zones a pod's persistent volumes allow: what karpenter core's volume topology
//! (`pkg/controllers/provisioning/scheduling/volumetopology.go`) adds to a pod before it is scheduled.
//!
//! - A claim bound to a PersistentVolume: the zones of the volume's node affinity (a volume usable
//!   anywhere does not constrain the pod).
//! - A claim not bound yet whose StorageClass binds `WaitForFirstConsumer`: the zones of the class's
//!   `allowedTopologies` (none listed: no constraint; the volume is made where the pod lands).
//! - Claims of a pod together: the zones every one of them allows (possibly none: then the pod cannot
//!   be placed, and the solver says so).
//!
//! Zone keys are the well-known `topology.kubernetes.io/zone`, its deprecated beta form, and the Azure
//! Disk CSI driver's `topology.disk.csi.azure.com/zone`, which upstream's provider normalises onto the
//! zone label (`pkg/utils/zones/normalization.go`); the driver's non-zonal value `""` and
//! cloud-provider-azure's `"0"` both mean regional, zone `""` here. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::model::labels::LABEL_ZONE;

/// Node labels a volume's zone may be written under.
const ZONE_KEYS: [&str; 3] =
    [LABEL_ZONE, "failure-domain.beta.kubernetes.io/zone", "topology.disk.csi.azure.com/zone"];

/// The zone a volume label value names, in the catalog's form (`""` for regional).
fn normalise_zone(value: &str) -> String {
    if value == "0" {
        String::new()
    } else {
        value.to_string()
    }
}

/// PersistentVolumeClaims, PersistentVolumes and StorageClasses, reduced to what decides zones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeIndex {
    /// `namespace/name` → (bound volume, storage class).
    claims: BTreeMap<String, (Option<String>, Option<String>)>,
    /// Volume name → the zones its node affinity allows; None when it allows every zone.
    volumes: BTreeMap<String, Option<BTreeSet<String>>>,
    /// Class name → the zones a `WaitForFirstConsumer` class allows; None when it does not constrain.
    classes: BTreeMap<String, Option<BTreeSet<String>>>,
}

impl VolumeIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn apply_claim(&mut self, claim: &core::PersistentVolumeClaim) {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or("default");
        let key = format!("{namespace}/{}", claim.metadata.name.as_deref().unwrap_or_default());
        let spec = claim.spec.as_ref();
        let volume = spec.and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());
        let class = spec.and_then(|s| s.storage_class_name.clone()).filter(|c| !c.is_empty());
        self.claims.insert(key, (volume, class));
    }

    /// Forgets a claim by `namespace/name`.
    pub fn delete_claim(&mut self, key: &str) {
        self.claims.remove(key);
    }

    pub fn apply_volume(&mut self, volume: &core::PersistentVolume) {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let terms = volume
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or_default();
        // Terms are ORed: the volume allows the union of their zones, unless one term leaves the zone open.
        let mut zones = Some(BTreeSet::new());
        for term in terms {
            let in_zones = term
                .match_expressions
                .iter()
                .flatten()
                .filter(|e| ZONE_KEYS.contains(&e.key.as_str()) && e.operator == "In")
                .map(|e| e.values.iter().flatten().map(|v| normalise_zone(v)).collect::<BTreeSet<_>>())
                .reduce(|a, b| a.intersection(&b).cloned().collect());
            match (in_zones, zones.as_mut()) {
                (Some(term_zones), Some(all)) => all.extend(term_zones),
                (None, _) => zones = None,
                (Some(_), None) => {}
            }
        }
        if terms.is_empty() {
            zones = None;
        }
        self.volumes.insert(name, zones);
    }

    pub fn delete_volume(&mut self, name: &str) {
        self.volumes.remove(name);
    }

    pub fn apply_class(&mut self, class: &StorageClass) {
        let name = class.metadata.name.clone().unwrap_or_default();
        let waits = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
        let zones: BTreeSet<String> = class
            .allowed_topologies
            .iter()
            .flatten()
            .flat_map(|t| t.match_label_expressions.iter().flatten())
            .filter(|e| ZONE_KEYS.contains(&e.key.as_str()))
            .flat_map(|e| e.values.iter().map(|v| normalise_zone(v)))
            .collect();
        self.classes.insert(name, (waits && !zones.is_empty()).then_some(zones));
    }

    pub fn delete_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Keys of the claims (`namespace/name`), volumes and classes held, for a relist.
    /// The volume a claim (`namespace`, `name`) is bound to, if any.
    pub fn claim_volume(&self, namespace: &str, name: &str) -> Option<&str> {
        self.claims.get(&format!("{namespace}/{name}")).and_then(|(volume, _)| volume.as_deref())
    }

    pub fn claim_keys(&self) -> impl Iterator<Item = &String> {
        self.claims.keys()
    }

    pub fn volume_names(&self) -> impl Iterator<Item = &String> {
        self.volumes.keys()
    }

    pub fn class_names(&self) -> impl Iterator<Item = &String> {
        self.classes.keys()
    }

    /// The zones the claims (names in `namespace`) allow together, sorted; None when none of them
    /// constrains the zone.
    pub fn zones(&self, namespace: &str, claims: &[String]) -> Option<Vec<String>> {
        let mut allowed: Option<BTreeSet<String>> = None;
        for claim in claims {
            let Some((volume, class)) = self.claims.get(&format!("{namespace}/{claim}")) else {
                continue;
            };
            let zones = match volume {
                Some(volume) => self.volumes.get(volume).cloned().flatten(),
                None => class.as_ref().and_then(|c| self.classes.get(c).cloned().flatten()),
            };
            if let Some(zones) = zones {
                allowed = Some(match allowed {
                    None => zones,
                    Some(before) => before.intersection(&zones).cloned().collect(),
                });
            }
        }
        allowed.map(|zones| zones.into_iter().collect())
    }
}

/// The claims a pod's volumes name: `persistentVolumeClaim.claimName`, and for a generic ephemeral
/// volume the claim Kubernetes creates for it, `<pod>-<volume>`.
pub fn pod_claims(pod_name: &str, spec: &core::PodSpec) -> Vec<String> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(pvc), _) => Some(pvc.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            (None, None) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_yaml::from_str(text).unwrap()
    }

    fn index() -> VolumeIndex {
        let mut index = VolumeIndex::new();
        index.apply_volume(&yaml(
            "metadata: {name: pv-2}\nspec:\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n        - matchExpressions:\n            - {key: topology.disk.csi.azure.com/zone, operator: In, values: [eastus-2]}\n",
        ));
        index.apply_volume(&yaml(
            "metadata: {name: pv-23}\nspec:\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n        - matchExpressions:\n            - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-2]}\n        - matchExpressions:\n            - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-3]}\n",
        ));
        index.apply_volume(&yaml("metadata: {name: pv-any}\nspec: {}\n"));
        index.apply_class(&yaml(
            "metadata: {name: zonal-wffc}\nprovisioner: disk.csi.azure.com\nvolumeBindingMode: WaitForFirstConsumer\nallowedTopologies:\n  - matchLabelExpressions:\n      - {key: topology.disk.csi.azure.com/zone, values: [eastus-1, eastus-3]}\n",
        ));
        index.apply_class(&yaml(
            "metadata: {name: immediate}\nprovisioner: disk.csi.azure.com\nvolumeBindingMode: Immediate\nallowedTopologies:\n  - matchLabelExpressions:\n      - {key: topology.kubernetes.io/zone, values: [eastus-1]}\n",
        ));
        for (name, volume, class) in [
            ("data-2", Some("pv-2"), None),
            ("data-23", Some("pv-23"), None),
            ("data-any", Some("pv-any"), None),
            ("pending-wffc", None, Some("zonal-wffc")),
            ("pending-immediate", None, Some("immediate")),
        ] {
            let mut claim = core::PersistentVolumeClaim::default();
            claim.metadata.name = Some(name.into());
            claim.metadata.namespace = Some("db".into());
            claim.spec = Some(core::PersistentVolumeClaimSpec {
                volume_name: volume.map(str::to_string),
                storage_class_name: class.map(str::to_string),
                ..Default::default()
            });
            index.apply_claim(&claim);
        }
        index
    }

    fn zones(index: &VolumeIndex, claims: &[&str]) -> Option<Vec<String>> {
        index.zones("db", &claims.iter().map(|c| c.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn bound_volumes_pin_their_zones_and_claims_intersect() {
        let index = index();
        assert_eq!(zones(&index, &["data-2"]), Some(vec!["eastus-2".into()]), "CSI key normalised");
        assert_eq!(zones(&index, &["data-23"]), Some(vec!["eastus-2".into(), "eastus-3".into()]));
        assert_eq!(zones(&index, &["data-2", "data-23"]), Some(vec!["eastus-2".into()]));
        assert_eq!(zones(&index, &["data-any"]), None, "a volume usable anywhere");
        assert_eq!(zones(&index, &["unknown"]), None);
        assert_eq!(index.zones("other", &["data-2".into()]), None, "claims are namespaced");
    }

    #[test]
    fn unbound_claims_follow_a_wait_for_first_consumer_class() {
        let index = index();
        assert_eq!(zones(&index, &["pending-wffc"]), Some(vec!["eastus-1".into(), "eastus-3".into()]));
        assert_eq!(zones(&index, &["pending-immediate"]), None, "Immediate binding decides elsewhere");
        assert_eq!(zones(&index, &["pending-wffc", "data-2"]), Some(vec![]), "no zone has both");
    }

    #[test]
    fn pods_name_their_claims_and_ephemeral_ones() {
        let spec: core::PodSpec = yaml(
            "containers: []\nvolumes:\n  - {name: data, persistentVolumeClaim: {claimName: data-2}}\n  - {name: scratch, ephemeral: {volumeClaimTemplate: {spec: {}}}}\n  - {name: cfg, configMap: {name: c}}\n",
        );
        assert_eq!(pod_claims("web-0", &spec), ["data-2", "web-0-scratch"]);
    }
}
