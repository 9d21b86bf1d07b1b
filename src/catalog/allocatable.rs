//! Capacity, overhead and allocatable resources of an Azure VM size as an AKS node.
//!
//! Owns the AKS formulas (upstream provider instancetype.go): the hypervisor memory overhead,
//! the kube-reserved brackets for CPU and memory, the eviction threshold, ephemeral storage from the OS disk
//! size and the max-pods default per network plugin. Pure: plain numbers in, `Resources` out.

use super::sku::SkuRecord;
use crate::model::resources::{Resources, AMD_GPU, CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS};
use crate::model::Overhead;

use super::sku::GpuVendor;

/// Share of VM memory the hypervisor keeps (`--vm-memory-overhead-percent`, upstream options.go default).
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// AKSNodeClass `osDiskSizeGB` default (upstream v1beta1 aksnodeclass.go).
pub const DEFAULT_OS_DISK_SIZE_GB: u32 = 128;
/// Kubelet `--eviction-hard memory.available=750Mi` set by AKS (upstream instancetype.go).
pub const EVICTION_THRESHOLD_MEMORY_BYTES: i64 = 750 << 20;

/// Max pods defaults (upstream utils.go GetMaxPods and consts.go): Azure CNI overlay and plugin `none`
/// (BYO CNI) are not bound by per-node IPs; Azure CNI with VNet IPs pre-allocates one IP per pod.
pub const MAX_PODS_OVERLAY_OR_NONE: u32 = 250;
pub const MAX_PODS_AZURE_CNI_NODE_SUBNET: u32 = 30;
pub const MAX_PODS_DEFAULT: u32 = 110;

/// Kube-reserved CPU brackets in millicores per core: 6% of core 1, 4% of core 2, 2% of cores 3–4,
/// 1% of every further core (AKS resource reservations, upstream instancetype.go reservedCPUTaxVCPU).
const CPU_RESERVED_MILLIS_PER_CORE: [(u64, i64); 4] = [(1, 60), (2, 40), (4, 20), (u64::MAX, 10)];

/// Kube-reserved memory brackets as (upper bound in MiB, percent): 25% of the first 4 GiB, 20% of the
/// next 4, 10% of the next 8, 6% up to 128 GiB, 2% above (upstream instancetype.go reservedMemoryTaxGi).
const MEMORY_RESERVED_PERCENT: [(u64, i64); 5] =
    [(4 << 10, 25), (8 << 10, 20), (16 << 10, 10), (128 << 10, 6), (u64::MAX, 2)];

/// The cluster's network plugin (`--network-plugin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkPlugin {
    #[default]
    Azure,
    /// Bring-your-own CNI.
    None,
    /// kubenet or anything else: the kubelet default applies.
    Other,
}

impl NetworkPlugin {
    pub fn parse(value: &str) -> NetworkPlugin {
        match value.trim().to_ascii_lowercase().as_str() {
            "azure" => NetworkPlugin::Azure,
            "none" => NetworkPlugin::None,
            _ => NetworkPlugin::Other,
        }
    }
}

/// Inputs to the capacity formulas: the AKSNodeClass settings and the operator options that matter.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityOptions {
    /// AKSNodeClass `maxPods`; when None the network-plugin default applies.
    pub max_pods: Option<u32>,
    /// AKSNodeClass `osDiskSizeGB`; when None, 128.
    pub os_disk_size_gb: Option<u32>,
    pub network_plugin: NetworkPlugin,
    /// `--network-plugin-mode overlay`.
    pub overlay: bool,
    pub vm_memory_overhead_percent: f64,
}

impl Default for CapacityOptions {
    /// AKS Node Auto Provisioning defaults: Azure CNI overlay, 128 GB OS disk, 7.5% memory overhead.
    fn default() -> Self {
        CapacityOptions {
            max_pods: None,
            os_disk_size_gb: None,
            network_plugin: NetworkPlugin::Azure,
            overlay: true,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
        }
    }
}

impl CapacityOptions {
    /// Pods per node: the NodeClass value, else the network-plugin default.
    pub fn max_pods(&self) -> u32 {
        if let Some(max_pods) = self.max_pods {
            return max_pods;
        }
        match (self.network_plugin, self.overlay) {
            (NetworkPlugin::None, _) | (NetworkPlugin::Azure, true) => MAX_PODS_OVERLAY_OR_NONE,
            (NetworkPlugin::Azure, false) => MAX_PODS_AZURE_CNI_NODE_SUBNET,
            (NetworkPlugin::Other, _) => MAX_PODS_DEFAULT,
        }
    }

    pub fn os_disk_size_gb(&self) -> u32 {
        self.os_disk_size_gb.unwrap_or(DEFAULT_OS_DISK_SIZE_GB)
    }
}

/// Kube-reserved CPU in millicores for a VM with `vcpus` cores. Exact integer arithmetic.
pub fn kube_reserved_cpu_millis(vcpus: u32) -> i64 {
    let mut reserved = 0;
    let mut lower = 0u64;
    for (upper, millis_per_core) in CPU_RESERVED_MILLIS_PER_CORE {
        let cores = u64::from(vcpus).min(upper).saturating_sub(lower);
        reserved += cores as i64 * millis_per_core;
        lower = upper;
    }
    reserved
}

/// Kube-reserved memory in bytes, taxed on the raw SKU memory and truncated to whole MiB as upstream does.
///
/// Computed exactly in MiB × percent, so bracket boundaries never suffer float rounding.
pub fn kube_reserved_memory_bytes(memory_mib: u64) -> i64 {
    let mut mib_times_percent: i64 = 0;
    let mut lower = 0u64;
    for (upper, percent) in MEMORY_RESERVED_PERCENT {
        let in_bracket = memory_mib.min(upper).saturating_sub(lower);
        mib_times_percent += in_bracket as i64 * percent;
        lower = upper;
    }
    (mib_times_percent / 100) << 20
}

/// Memory capacity: whole GiB of the SKU minus the hypervisor overhead, rounded up to a byte.
///
/// The overhead product is computed in f64 on purpose, exactly like upstream, so the result is the same
/// byte count an upstream-provisioned node would advertise.
pub fn memory_capacity_bytes(memory_mib: u64, vm_memory_overhead_percent: f64) -> i64 {
    let whole_gib_bytes = ((memory_mib / 1024) << 30) as i64;
    let overhead = (whole_gib_bytes as f64 * vm_memory_overhead_percent).ceil() as i64;
    whole_gib_bytes - overhead
}

/// Capacity of the VM as a node: cpu, memory, ephemeral-storage, pods and whole GPUs.
pub fn capacity(sku: &SkuRecord, options: &CapacityOptions) -> Resources {
    let mut capacity = Resources::new()
        .with(CPU, i64::from(sku.vcpus) * 1000)
        .with(MEMORY, memory_capacity_bytes(sku.memory_mib, options.vm_memory_overhead_percent))
        .with(EPHEMERAL_STORAGE, i64::from(options.os_disk_size_gb()) * 1_000_000_000)
        .with(PODS, i64::from(options.max_pods()));
    if let Some((vendor, count)) = sku.whole_gpus() {
        let resource = match vendor {
            GpuVendor::Nvidia => NVIDIA_GPU,
            GpuVendor::Amd => AMD_GPU,
        };
        capacity.set(resource, i64::from(count));
    }
    capacity
}

/// The AKS node overhead for the size.
pub fn overhead(sku: &SkuRecord) -> Overhead {
    Overhead {
        kube_reserved: Resources::new()
            .with(CPU, kube_reserved_cpu_millis(sku.vcpus))
            .with(MEMORY, kube_reserved_memory_bytes(sku.memory_mib)),
        system_reserved: Resources::new().with(CPU, 0).with(MEMORY, 0),
        eviction_threshold: Resources::new().with(MEMORY, EVICTION_THRESHOLD_MEMORY_BYTES),
    }
}

/// Allocatable = capacity − overhead, floored at zero per resource.
pub fn allocatable(capacity: &Resources, overhead: &Overhead) -> Resources {
    capacity.saturating_sub(&overhead.total())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::sku::embedded_sku;

    const MI: i64 = 1 << 20;

    fn alloc_of(name: &str, options: &CapacityOptions) -> (Resources, Resources) {
        let sku = embedded_sku(name).unwrap();
        let cap = capacity(sku, options);
        (cap.clone(), allocatable(&cap, &overhead(sku)))
    }

    #[test]
    fn cpu_brackets() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 100); // 60 + 40
        assert_eq!(kube_reserved_cpu_millis(3), 120); // 60 + 40 + 20
        assert_eq!(kube_reserved_cpu_millis(4), 140); // 60 + 40 + 20 + 20
        assert_eq!(kube_reserved_cpu_millis(8), 180); // 140 + 4 × 10
        assert_eq!(kube_reserved_cpu_millis(96), 1060); // 140 + 92 × 10
    }

    #[test]
    fn memory_brackets_match_upstream_examples() {
        // 7 GiB: 4096×25% + 3072×20% = 1024 + 614.4 = 1638.4 → 1638 MiB.
        assert_eq!(kube_reserved_memory_bytes(7 << 10), 1638 * MI);
        // 8 GiB: 1024 + 819.2 = 1843.2 → 1843 MiB.
        assert_eq!(kube_reserved_memory_bytes(8 << 10), 1843 * MI);
        // 64 GiB: 1024 + 819.2 + 819.2 + 49152×6% (2949.12) = 5611.52 → 5611 MiB.
        assert_eq!(kube_reserved_memory_bytes(64 << 10), 5611 * MI);
    }

    #[test]
    fn max_pods_defaults() {
        let mut o = CapacityOptions::default();
        assert_eq!(o.max_pods(), 250); // azure + overlay
        o.overlay = false;
        assert_eq!(o.max_pods(), 30); // azure, pod IPs from the node subnet
        o.network_plugin = NetworkPlugin::None;
        assert_eq!(o.max_pods(), 250);
        o.network_plugin = NetworkPlugin::parse("kubenet");
        assert_eq!(o.max_pods(), 110);
        o.max_pods = Some(42);
        assert_eq!(o.max_pods(), 42);
    }

    #[test]
    fn d2s_v5() {
        // 2 vCPU, 8 GiB. cpu 2000 − 100 = 1900m.
        // memory capacity: 8 GiB = 8589934592; ×0.075 = 644245094.4 → 644245095; 7945689497.
        // allocatable: 7945689497 − 1843 MiB (1932525568) − 750 MiB (786432000) = 5226731929.
        let (cap, alloc) = alloc_of("Standard_D2s_v5", &CapacityOptions::default());
        assert_eq!(cap.get(MEMORY), 7_945_689_497);
        assert_eq!(alloc.get(CPU), 1900);
        assert_eq!(alloc.get(MEMORY), 5_226_731_929);
    }

    #[test]
    fn d4s_v5() {
        // 4 vCPU, 16 GiB. cpu 4000 − 140 = 3860m.
        // capacity: 17179869184 − ceil(1288490188.8) = 15891378995.
        // kube-reserved: 1024 + 819.2 + 819.2 = 2662.4 → 2662 MiB (2791309312).
        // allocatable: 15891378995 − 2791309312 − 786432000 = 12313637683.
        let (cap, alloc) = alloc_of("Standard_D4s_v5", &CapacityOptions::default());
        assert_eq!(cap.get(CPU), 4000);
        assert_eq!(cap.get(MEMORY), 15_891_378_995);
        assert_eq!(cap.get(EPHEMERAL_STORAGE), 128_000_000_000);
        assert_eq!(cap.get(PODS), 250);
        assert_eq!(alloc.get(CPU), 3860);
        assert_eq!(alloc.get(MEMORY), 12_313_637_683);
        assert_eq!(alloc.get(PODS), 250);
        assert_eq!(alloc.get(NVIDIA_GPU), 0);
    }

    #[test]
    fn d8s_v5() {
        // 8 vCPU, 32 GiB. cpu 8000 − 180 = 7820m.
        // capacity: 34359738368 − ceil(2576980377.6) = 31782757990.
        // kube-reserved: 2662.4 + 16384×6% (983.04) = 3645.44 → 3645 MiB (3822059520).
        // allocatable: 31782757990 − 3822059520 − 786432000 = 27174266470.
        let (_, alloc) = alloc_of("Standard_D8s_v5", &CapacityOptions::default());
        assert_eq!(alloc.get(CPU), 7820);
        assert_eq!(alloc.get(MEMORY), 27_174_266_470);
    }

    #[test]
    fn e16s_v5() {
        // 16 vCPU, 128 GiB. cpu 16000 − (140 + 12×10) = 15740m.
        // capacity: 137438953472 − ceil(10307921510.4) = 127131031961.
        // kube-reserved: 2662.4 + 114688×6% (6881.28) = 9543.68 → 9543 MiB (10006560768).
        // allocatable: 127131031961 − 10006560768 − 786432000 = 116338039193.
        let (_, alloc) = alloc_of("Standard_E16s_v5", &CapacityOptions::default());
        assert_eq!(alloc.get(CPU), 15_740);
        assert_eq!(alloc.get(MEMORY), 116_338_039_193);
    }

    #[test]
    fn nc6s_v3_gpu() {
        // 6 vCPU, 112 GiB, 1 × V100. cpu 6000 − (140 + 2×10) = 5840m.
        // capacity: 120259084288 − ceil(9019431321.6) = 111239652966.
        // kube-reserved: 2662.4 + 98304×6% (5898.24) = 8560.64 → 8560 MiB (8975810560).
        // allocatable: 111239652966 − 8975810560 − 786432000 = 101477410406.
        let (cap, alloc) = alloc_of("Standard_NC6s_v3", &CapacityOptions::default());
        assert_eq!(cap.get(NVIDIA_GPU), 1);
        assert_eq!(alloc.get(NVIDIA_GPU), 1);
        assert_eq!(alloc.get(CPU), 5840);
        assert_eq!(alloc.get(MEMORY), 101_477_410_406);
    }

    #[test]
    fn nc24ads_a100_v4_gpu_above_128_gib() {
        // 24 vCPU, 220 GiB, 1 × A100. cpu 24000 − (140 + 20×10) = 23660m.
        // capacity: 236223201280 − 17716740096 (exactly 16.5 GiB) = 218506461184.
        // kube-reserved: 2662.4 + 6881.28 + 94208×2% (1884.16) = 11427.84 → 11427 MiB (11982077952).
        // allocatable: 218506461184 − 11982077952 − 786432000 = 205737951232.
        let (cap, alloc) = alloc_of("Standard_NC24ads_A100_v4", &CapacityOptions::default());
        assert_eq!(cap.get(NVIDIA_GPU), 1);
        assert_eq!(alloc.get(CPU), 23_660);
        assert_eq!(alloc.get(MEMORY), 205_737_951_232);
    }

    #[test]
    fn options_change_storage_pods_and_overhead() {
        let options = CapacityOptions {
            max_pods: Some(60),
            os_disk_size_gb: Some(256),
            vm_memory_overhead_percent: 0.0,
            ..CapacityOptions::default()
        };
        let (cap, _) = alloc_of("Standard_D4s_v5", &options);
        assert_eq!(cap.get(EPHEMERAL_STORAGE), 256_000_000_000);
        assert_eq!(cap.get(PODS), 60);
        assert_eq!(cap.get(MEMORY), 16 << 30);
    }

    #[test]
    fn fractional_memory_is_floored_for_capacity_but_taxed_raw() {
        // 3.5 GiB (3584 MiB): capacity uses 3 GiB; kube-reserved uses 3584 × 25% = 896 MiB.
        assert_eq!(memory_capacity_bytes(3584, 0.0), 3 << 30);
        assert_eq!(kube_reserved_memory_bytes(3584), 896 * MI);
    }
}
