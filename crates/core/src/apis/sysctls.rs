//! The `linuxOSConfig.sysctls` block of an AKSNodeClass: kernel parameters with the ranges AKS allows
//! (AKS custom node configuration), plus the cross-field rules the API server checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Kernel parameters for the nodes; each maps to the sysctl named in its doc.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.netCoreRmemDefault) || !has(self.netCoreRmemMax) || self.netCoreRmemDefault <= self.netCoreRmemMax",
     "message": "sysctls.netCoreRmemDefault must not be larger than sysctls.netCoreRmemMax"},
    {"rule": "!has(self.netCoreWmemDefault) || !has(self.netCoreWmemMax) || self.netCoreWmemDefault <= self.netCoreWmemMax",
     "message": "sysctls.netCoreWmemDefault must not be larger than sysctls.netCoreWmemMax"},
    {"rule": "!has(self.netIPv4NeighDefaultGcThresh1) || !has(self.netIPv4NeighDefaultGcThresh2) || self.netIPv4NeighDefaultGcThresh1 <= self.netIPv4NeighDefaultGcThresh2",
     "message": "sysctls.netIPv4NeighDefaultGcThresh1 must not be larger than netIPv4NeighDefaultGcThresh2"},
    {"rule": "!has(self.netIPv4NeighDefaultGcThresh2) || !has(self.netIPv4NeighDefaultGcThresh3) || self.netIPv4NeighDefaultGcThresh2 <= self.netIPv4NeighDefaultGcThresh3",
     "message": "sysctls.netIPv4NeighDefaultGcThresh2 must not be larger than netIPv4NeighDefaultGcThresh3"},
    {"rule": "!has(self.netIPv4IPLocalPortRange) || (int(self.netIPv4IPLocalPortRange.split(' ')[0]) >= 1024 && int(self.netIPv4IPLocalPortRange.split(' ')[0]) <= 60999 && int(self.netIPv4IPLocalPortRange.split(' ')[1]) >= 32768 && int(self.netIPv4IPLocalPortRange.split(' ')[1]) <= 65535 && int(self.netIPv4IPLocalPortRange.split(' ')[0]) < int(self.netIPv4IPLocalPortRange.split(' ')[1]))",
     "message": "sysctls.netIPv4IPLocalPortRange must be \"first last\" with first in 1024-60999, last in 32768-65535 and first below last"}
]))]
pub struct SysctlConfiguration {
    /// `fs.aio-max-nr`, 65536 to 6553500.
    #[serde(default, rename = "fsAioMaxNr", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 65536, max = 6553500))]
    pub fs_aio_max_nr: Option<i32>,
    /// `fs.file-max`, 8192 to 12000500.
    #[serde(default, rename = "fsFileMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8192, max = 12000500))]
    pub fs_file_max: Option<i32>,
    /// `fs.inotify.max_user_watches`, 781250 to 2097152.
    #[serde(default, rename = "fsInotifyMaxUserWatches", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 781250, max = 2097152))]
    pub fs_inotify_max_user_watches: Option<i32>,
    /// `fs.nr_open`, 8192 to 20000500.
    #[serde(default, rename = "fsNrOpen", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8192, max = 20000500))]
    pub fs_nr_open: Option<i32>,
    /// `kernel.threads-max`, 20 to 513785.
    #[serde(default, rename = "kernelThreadsMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 20, max = 513785))]
    pub kernel_threads_max: Option<i32>,
    /// `net.core.netdev_max_backlog`, 1000 to 3240000.
    #[serde(default, rename = "netCoreNetdevMaxBacklog", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000, max = 3240000))]
    pub net_core_netdev_max_backlog: Option<i32>,
    /// `net.core.optmem_max`, 20480 to 4194304.
    #[serde(default, rename = "netCoreOptmemMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 20480, max = 4194304))]
    pub net_core_optmem_max: Option<i32>,
    /// `net.core.rmem_default`, 212992 to 134217728.
    #[serde(default, rename = "netCoreRmemDefault", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 212992, max = 134217728))]
    pub net_core_rmem_default: Option<i32>,
    /// `net.core.rmem_max`, 212992 to 134217728.
    #[serde(default, rename = "netCoreRmemMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 212992, max = 134217728))]
    pub net_core_rmem_max: Option<i32>,
    /// `net.core.somaxconn`, 4096 to 3240000.
    #[serde(default, rename = "netCoreSomaxconn", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 4096, max = 3240000))]
    pub net_core_somaxconn: Option<i32>,
    /// `net.core.wmem_default`, 212992 to 134217728.
    #[serde(default, rename = "netCoreWmemDefault", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 212992, max = 134217728))]
    pub net_core_wmem_default: Option<i32>,
    /// `net.core.wmem_max`, 212992 to 134217728.
    #[serde(default, rename = "netCoreWmemMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 212992, max = 134217728))]
    pub net_core_wmem_max: Option<i32>,
    /// `net.ipv4.neigh.default.gc_thresh1`, 128 to 80000.
    #[serde(default, rename = "netIPv4NeighDefaultGcThresh1", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 80000))]
    pub net_ipv4_neigh_default_gc_thresh1: Option<i32>,
    /// `net.ipv4.neigh.default.gc_thresh2`, 512 to 90000.
    #[serde(default, rename = "netIPv4NeighDefaultGcThresh2", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 512, max = 90000))]
    pub net_ipv4_neigh_default_gc_thresh2: Option<i32>,
    /// `net.ipv4.neigh.default.gc_thresh3`, 1024 to 100000.
    #[serde(default, rename = "netIPv4NeighDefaultGcThresh3", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 100000))]
    pub net_ipv4_neigh_default_gc_thresh3: Option<i32>,
    /// `net.ipv4.tcp_fin_timeout`, 5 to 120.
    #[serde(default, rename = "netIPv4TCPFinTimeout", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 120))]
    pub net_ipv4_tcp_fin_timeout: Option<i32>,
    /// `net.ipv4.tcp_keepalive_probes`, 1 to 15.
    #[serde(default, rename = "netIPv4TCPKeepaliveProbes", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 15))]
    pub net_ipv4_tcp_keepalive_probes: Option<i32>,
    /// `net.ipv4.tcp_keepalive_time`, 30 to 432000.
    #[serde(default, rename = "netIPv4TCPKeepaliveTime", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 432000))]
    pub net_ipv4_tcp_keepalive_time: Option<i32>,
    /// `net.ipv4.tcp_max_syn_backlog`, 128 to 3240000.
    #[serde(default, rename = "netIPv4TCPMaxSynBacklog", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 3240000))]
    pub net_ipv4_tcp_max_syn_backlog: Option<i32>,
    /// `net.ipv4.tcp_max_tw_buckets`, 8000 to 1440000.
    #[serde(default, rename = "netIPv4TCPMaxTwBuckets", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8000, max = 1440000))]
    pub net_ipv4_tcp_max_tw_buckets: Option<i32>,
    /// `net.ipv4.tcp_keepalive_intvl`, 10 to 90.
    #[serde(default, rename = "netIPv4TCPKeepaliveIntvl", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 90))]
    pub net_ipv4_tcp_keepalive_intvl: Option<i32>,
    /// `net.netfilter.nf_conntrack_buckets`, 65536 to 524288.
    #[serde(default, rename = "netNetfilterNfConntrackBuckets", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 65536, max = 524288))]
    pub net_netfilter_nf_conntrack_buckets: Option<i32>,
    /// `net.netfilter.nf_conntrack_max`, 131072 to 2097152.
    #[serde(default, rename = "netNetfilterNfConntrackMax", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 131072, max = 2097152))]
    pub net_netfilter_nf_conntrack_max: Option<i32>,
    /// `vm.max_map_count`, 65530 to 262144.
    #[serde(default, rename = "vmMaxMapCount", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 65530, max = 262144))]
    pub vm_max_map_count: Option<i32>,
    /// `vm.swappiness`, 0 to 100.
    #[serde(default, rename = "vmSwappiness", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub vm_swappiness: Option<i32>,
    /// `vm.vfs_cache_pressure`, 0 to 100.
    #[serde(default, rename = "vmVfsCachePressure", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub vm_vfs_cache_pressure: Option<i32>,
    /// `net.ipv4.ip_local_port_range` as "first last".
    #[serde(default, rename = "netIPv4IPLocalPortRange", skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^\d+ \d+$"), length(max = 11))]
    pub net_ipv4_ip_local_port_range: Option<String>,
    /// `net.ipv4.tcp_tw_reuse`.
    #[serde(default, rename = "netIPv4TCPTwReuse", skip_serializing_if = "Option::is_none")]
    pub net_ipv4_tcp_tw_reuse: Option<bool>,
}
