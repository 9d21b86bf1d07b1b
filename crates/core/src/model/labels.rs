//! Well-known label keys, annotations, taints and finalizers, and which label keys users may not set.
//!
//! One place for every string key the project reads or writes on Kubernetes objects, so that the CRD
//! validation rules, the catalog, the solver and the controllers agree. The lists follow upstream
//! Karpenter core (`pkg/apis/v1/labels.go`) and the Azure provider (`pkg/apis/v1beta1/labels.go`).

// --- Upstream Kubernetes labels ------------------------------------------------------------------

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";

// --- Karpenter core (karpenter.sh) ---------------------------------------------------------------

pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set on a Node once its NodeClaim registered it.
pub const LABEL_REGISTERED: &str = "karpenter.sh/registered";
/// Set on a Node once its NodeClaim is initialized.
pub const LABEL_INITIALIZED: &str = "karpenter.sh/initialized";
/// Azure nodes carry this so core does not copy taints back and forth (upstream provider labels.go).
pub const LABEL_DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Nodes are Linux only (Windows is not supported, as in upstream VM mode).
pub const OS_LINUX: &str = "linux";
pub const CAPACITY_TYPE_SPOT: &str = "spot";

// --- Azure provider (karpenter.azure.com) --------------------------------------------------------

pub const LABEL_SKU_NAME: &str = "karpenter.azure.com/sku-name";
pub const LABEL_SKU_FAMILY: &str = "karpenter.azure.com/sku-family";
pub const LABEL_SKU_SERIES: &str = "karpenter.azure.com/sku-series";
pub const LABEL_SKU_VERSION: &str = "karpenter.azure.com/sku-version";
pub const LABEL_SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
/// Memory in MiB (GiB × 1024), as upstream.
pub const LABEL_SKU_MEMORY: &str = "karpenter.azure.com/sku-memory";
pub const LABEL_SKU_NETWORKING_ACCELERATED: &str = "karpenter.azure.com/sku-networking-accelerated";
pub const LABEL_SKU_STORAGE_PREMIUM_CAPABLE: &str = "karpenter.azure.com/sku-storage-premium-capable";
pub const LABEL_SKU_STORAGE_ULTRA_SSD: &str = "karpenter.azure.com/sku-storage-ultra-ssd";
pub const LABEL_SKU_STORAGE_EPHEMERAL_OS_MAX_SIZE: &str =
    "karpenter.azure.com/sku-storage-ephemeralos-maxsize";
pub const LABEL_SKU_GPU_NAME: &str = "karpenter.azure.com/sku-gpu-name";
pub const LABEL_SKU_GPU_MANUFACTURER: &str = "karpenter.azure.com/sku-gpu-manufacturer";
pub const LABEL_SKU_GPU_COUNT: &str = "karpenter.azure.com/sku-gpu-count";
pub const LABEL_PLACEMENT_SCOPE: &str = "karpenter.azure.com/placement-scope";
pub const LABEL_AKS_NODE_CLASS: &str = "karpenter.azure.com/aksnodeclass";
/// Used for image matching only; users may not select on it (upstream keeps it restricted).
pub const LABEL_SKU_HYPERV_GENERATION: &str = "karpenter.azure.com/sku-hyperv-generation";

// --- AKS (kubernetes.azure.com) ------------------------------------------------------------------

pub const LABEL_AKS_CLUSTER: &str = "kubernetes.azure.com/cluster";
pub const LABEL_AKS_MODE: &str = "kubernetes.azure.com/mode";
/// The client ID of the kubelet's managed identity, which AKS labels every node with.
pub const LABEL_KUBELET_IDENTITY: &str = "kubernetes.azure.com/kubelet-identity-client-id";
pub const LABEL_AKS_SCALESET_PRIORITY: &str = "kubernetes.azure.com/scalesetpriority";
pub const LABEL_AKS_PRIORITY: &str = "kubernetes.azure.com/priority";
pub const LABEL_AKS_OS_SKU: &str = "kubernetes.azure.com/os-sku";
pub const LABEL_AKS_FIPS_ENABLED: &str = "kubernetes.azure.com/fips_enabled";
pub const LABEL_AKS_SKU_CPU: &str = "kubernetes.azure.com/sku-cpu";
pub const LABEL_AKS_SKU_MEMORY: &str = "kubernetes.azure.com/sku-memory";
pub const LABEL_AKS_ROLE: &str = "kubernetes.azure.com/role";

// --- Annotations ---------------------------------------------------------------------------------

pub const ANNOTATION_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// The ReplicaSet controller removes pods with a lower cost first; disruption weighs evictions by it.
pub const ANNOTATION_POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// On a NodeClaim the disruption controller launched as a replacement: the candidate nodes (comma
/// separated) it replaces, so a controller that restarts mid-command resumes it instead of launching
/// the replacements again.
pub const ANNOTATION_REPLACEMENT_FOR: &str = "karpenter.azure.com/replacement-for";
/// On a NodeClaim: the hash of its NodePool's template when it was created, and the hash's format
/// version; drift compares them with the pool's current hash (`disruption/drift.rs`).
pub const ANNOTATION_NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Whether a NodeClaim's minValues were lowered under MinValuesPolicy BestEffort, "true" or "false"
/// (upstream core pkg/apis/v1/labels.go `NodeClaimMinValuesRelaxedAnnotationKey`).
pub const ANNOTATION_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// On a NodeClaim: "true" when a NodeOverlay priced one of its sizes, or extended one's capacity
/// (upstream core pkg/apis/v1alpha1/labels.go `PriceOverlayAppliedAnnotationKey`,
/// `CapacityOverlayAppliedAnnotationKey`).
pub const ANNOTATION_PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
pub const ANNOTATION_CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
pub const ANNOTATION_NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// On a NodeClaim: the hash of its AKSNodeClass's spec (without tags) when it was created, and its
/// format version (`disruption/drift.rs`).
pub const ANNOTATION_NODECLASS_HASH: &str = "karpenter.azure.com/aksnodeclass-hash";
pub const ANNOTATION_NODECLASS_HASH_VERSION: &str = "karpenter.azure.com/aksnodeclass-hash-version";

// --- Taints --------------------------------------------------------------------------------------

/// A node registers with this taint; the NodeClaim lifecycle removes it on registration.
pub const TAINT_UNREGISTERED: &str = "karpenter.sh/unregistered";
/// Put on a node that is being disrupted so nothing new lands on it.
pub const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";

// --- Finalizers ----------------------------------------------------------------------------------

pub const FINALIZER_TERMINATION: &str = "karpenter.sh/termination";
/// Holds an AKSNodeClass until no NodeClaim names it (upstream provider `v1beta1.TerminationFinalizer`).
pub const FINALIZER_NODECLASS_TERMINATION: &str = "karpenter.azure.com/termination";

// --- Which keys users may use --------------------------------------------------------------------

/// Labels the scheduler understands without a NodePool defining them: a requirement on one of these
/// is satisfiable by the instance types themselves (upstream `WellKnownLabels`, plus the provider's).
pub const WELL_KNOWN_LABELS: &[&str] = &[
    LABEL_NODEPOOL,
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_INSTANCE_TYPE,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_CAPACITY_TYPE,
    LABEL_WINDOWS_BUILD,
    LABEL_SKU_NAME,
    LABEL_SKU_FAMILY,
    LABEL_SKU_SERIES,
    LABEL_SKU_VERSION,
    LABEL_SKU_CPU,
    LABEL_SKU_MEMORY,
    LABEL_SKU_NETWORKING_ACCELERATED,
    LABEL_SKU_STORAGE_PREMIUM_CAPABLE,
    LABEL_SKU_STORAGE_ULTRA_SSD,
    LABEL_SKU_STORAGE_EPHEMERAL_OS_MAX_SIZE,
    LABEL_SKU_GPU_NAME,
    LABEL_SKU_GPU_MANUFACTURER,
    LABEL_SKU_GPU_COUNT,
    LABEL_PLACEMENT_SCOPE,
    LABEL_AKS_SCALESET_PRIORITY,
    LABEL_AKS_PRIORITY,
    LABEL_AKS_MODE,
    LABEL_AKS_OS_SKU,
    LABEL_AKS_FIPS_ENABLED,
    LABEL_AKS_SKU_CPU,
    LABEL_AKS_SKU_MEMORY,
];

/// Keys in the `kubernetes.io` domain that users may still name (upstream's exception list).
pub const ALLOWED_KUBERNETES_IO_LABELS: &[&str] = &[
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_INSTANCE_TYPE,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_WINDOWS_BUILD,
];

/// Sub-domains of `kubernetes.io` / `k8s.io` that stay open to users.
pub const ALLOWED_KUBERNETES_IO_SUBDOMAINS: &[&str] =
    &["node.kubernetes.io", "node-restriction.kubernetes.io"];
pub const ALLOWED_K8S_IO_SUBDOMAINS: &[&str] = &["kops.k8s.io"];

/// `karpenter.sh` keys that may appear in NodePool requirements and labels.
pub const ALLOWED_KARPENTER_SH_LABELS: &[&str] = &[LABEL_CAPACITY_TYPE, LABEL_NODEPOOL];

/// `karpenter.azure.com` keys that may appear in requirements and labels (provider allowlist).
pub const ALLOWED_KARPENTER_AZURE_LABELS: &[&str] = &[
    LABEL_AKS_NODE_CLASS,
    LABEL_SKU_NAME,
    LABEL_SKU_FAMILY,
    LABEL_SKU_SERIES,
    LABEL_SKU_VERSION,
    LABEL_SKU_CPU,
    LABEL_SKU_MEMORY,
    LABEL_SKU_NETWORKING_ACCELERATED,
    LABEL_SKU_STORAGE_PREMIUM_CAPABLE,
    LABEL_SKU_STORAGE_ULTRA_SSD,
    LABEL_SKU_STORAGE_EPHEMERAL_OS_MAX_SIZE,
    LABEL_SKU_GPU_NAME,
    LABEL_SKU_GPU_MANUFACTURER,
    LABEL_SKU_GPU_COUNT,
    LABEL_PLACEMENT_SCOPE,
];

/// `kubernetes.azure.com` keys that may appear in requirements and labels (provider allowlist).
pub const ALLOWED_KUBERNETES_AZURE_LABELS: &[&str] = &[
    LABEL_AKS_MODE,
    LABEL_AKS_SCALESET_PRIORITY,
    LABEL_AKS_PRIORITY,
    LABEL_AKS_FIPS_ENABLED,
    LABEL_AKS_OS_SKU,
    LABEL_AKS_CLUSTER,
    LABEL_AKS_SKU_CPU,
    LABEL_AKS_SKU_MEMORY,
    "kubernetes.azure.com/ebpf-dataplane",
    "kubernetes.azure.com/ebpf-host-routing",
    "kubernetes.azure.com/network-policy",
    "kubernetes.azure.com/hostedvm",
];

/// Why a label key may not be set by users, or `None` when it may.
///
/// This is the Rust twin of the CEL rules in the CRDs (see [`crate::apis::validation`]); the simulator
/// and the solver use it to reject pods and NodePools the API server would not have accepted.
pub fn restricted_label_reason(key: &str) -> Option<String> {
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    let ends_with_any = |subs: &[&str]| subs.iter().any(|s| domain.ends_with(s));
    if key == LABEL_HOSTNAME {
        return Some(format!("label {key:?} is restricted: the hostname is set by the node"));
    }
    if domain.ends_with("kubernetes.io")
        && !ALLOWED_KUBERNETES_IO_LABELS.contains(&key)
        && !ends_with_any(ALLOWED_KUBERNETES_IO_SUBDOMAINS)
    {
        return Some(format!(
            "label domain \"kubernetes.io\" is restricted; allowed keys are {} and the node.kubernetes.io and node-restriction.kubernetes.io domains",
            ALLOWED_KUBERNETES_IO_LABELS.join(", ")
        ));
    }
    if domain.ends_with("k8s.io") && !ends_with_any(ALLOWED_K8S_IO_SUBDOMAINS) {
        return Some("label domain \"k8s.io\" is restricted; only kops.k8s.io is allowed".into());
    }
    if domain.ends_with("karpenter.sh") && !ALLOWED_KARPENTER_SH_LABELS.contains(&key) {
        return Some(format!(
            "label domain \"karpenter.sh\" is restricted; allowed keys are {}",
            ALLOWED_KARPENTER_SH_LABELS.join(", ")
        ));
    }
    if domain.ends_with("karpenter.azure.com") && !ALLOWED_KARPENTER_AZURE_LABELS.contains(&key) {
        return Some(format!(
            "label domain \"karpenter.azure.com\" is restricted; allowed keys are {}",
            ALLOWED_KARPENTER_AZURE_LABELS.join(", ")
        ));
    }
    if domain.ends_with("kubernetes.azure.com") && !ALLOWED_KUBERNETES_AZURE_LABELS.contains(&key) {
        return Some(format!(
            "label domain \"kubernetes.azure.com\" is restricted; allowed keys are {}",
            ALLOWED_KUBERNETES_AZURE_LABELS.join(", ")
        ));
    }
    None
}

/// The values a well-known key can take, for the keys that have a known set (upstream core
/// `pkg/apis/v1/labels.go` `WellKnownValuesForRequirements`): `reserved` is among them although Azure
/// offers no reserved capacity.
pub fn well_known_values(key: &str) -> Option<&'static [&'static str]> {
    (key == LABEL_CAPACITY_TYPE).then_some(&[CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, "reserved"])
}

/// Deprecated aliases of well-known keys and the key each stands for (upstream core
/// `pkg/apis/v1/labels.go` `NormalizedLabels`): a requirement on an alias is a requirement on the key.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", LABEL_ZONE),
    ("beta.kubernetes.io/arch", LABEL_ARCH),
    ("beta.kubernetes.io/os", LABEL_OS),
    ("beta.kubernetes.io/instance-type", LABEL_INSTANCE_TYPE),
    ("failure-domain.beta.kubernetes.io/region", LABEL_REGION),
];

/// The well-known key a deprecated alias stands for, or `key` itself.
pub fn normalized_key(key: &str) -> &str {
    NORMALIZED_LABELS.iter().find(|(alias, _)| *alias == key).map_or(key, |(_, k)| k)
}

/// True when the scheduler may treat a requirement on `key` as satisfiable by instance types alone.
pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
}

/// Well-known keys whose value the NodePool decides, not the instance type: the pool's name, and the
/// AKS mode, which every size offers as `system` or `user` (upstream provider
/// `pkg/providers/instancetype/instancetype.go`: `AKSLabelMode In [system, user]`) and a node gets from
/// its pool's labels, `user` when the pool does not say.
pub fn is_pool_decided(key: &str) -> bool {
    key == LABEL_NODEPOOL || key == LABEL_AKS_MODE
}

/// A node's AKS mode when its pool does not set one.
pub const AKS_MODE_DEFAULT: &str = "user";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_domains_are_free() {
        assert_eq!(restricted_label_reason("team"), None);
        assert_eq!(restricted_label_reason("example.com/team"), None);
        assert_eq!(restricted_label_reason(LABEL_ZONE), None);
        assert_eq!(restricted_label_reason("node.kubernetes.io/pool"), None);
        assert_eq!(restricted_label_reason("kops.k8s.io/instancegroup"), None);
        assert_eq!(restricted_label_reason(LABEL_CAPACITY_TYPE), None);
        assert_eq!(restricted_label_reason(LABEL_SKU_FAMILY), None);
        assert_eq!(restricted_label_reason(LABEL_AKS_MODE), None);
    }

    #[test]
    fn restricted_domains_are_named() {
        for (key, domain) in [
            (LABEL_HOSTNAME, "hostname"),
            ("kubernetes.io/custom", "kubernetes.io"),
            ("k8s.io/custom", "k8s.io"),
            (LABEL_REGISTERED, "karpenter.sh"),
            (LABEL_SKU_HYPERV_GENERATION, "karpenter.azure.com"),
            (LABEL_AKS_ROLE, "kubernetes.azure.com"),
        ] {
            let reason = restricted_label_reason(key).expect(key);
            assert!(reason.contains(domain), "{key}: {reason}");
        }
    }

    #[test]
    fn every_allowed_provider_label_is_well_known_or_cluster_scoped() {
        for key in ALLOWED_KARPENTER_AZURE_LABELS {
            assert!(is_well_known(key) || *key == LABEL_AKS_NODE_CLASS, "{key}");
        }
    }
}
