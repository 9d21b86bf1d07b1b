//! Which sizes get the NVIDIA driver at boot and which driver, as upstream decides them
//! (Azure provider pkg/utils/gpu.go with its supported-gpus.yaml, kept in sync with AgentBaker).
//!
//! A size upstream knows as an NVIDIA size boots with `GPU_NODE=true`: the node image installs the driver
//! from `mcr.microsoft.com/aks/aks-gpu-<type>:<version>-<suffix>`, containerd runs the NVIDIA runtime and
//! the device plugin advertises `nvidia.com/gpu`. AKSNodeClass `gpu.mode: None` leaves the driver to the
//! user (GPU Operator), and the node then boots as a CPU node.

/// The NVIDIA driver a size installs: `GPU_DRIVER_VERSION`, `GPU_DRIVER_TYPE`, `GPU_IMAGE_SHA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuDriver {
    pub version: &'static str,
    pub driver_type: &'static str,
    pub image_sha: &'static str,
}

/// Legacy R470 for NCv1 (K80), through the `cuda` image (gpu.go Nvidia470CudaDriverVersion).
const CUDA_NCV1: GpuDriver =
    GpuDriver { version: "470.82.01", driver_type: "cuda", image_sha: "20260629214430" };
/// The R580 LTS line the AKS GPU image prebakes; modern CUDA sizes must match it or NVML reports a
/// driver/library mismatch (gpu.go NvidiaCudaLTSDriverVersion, AKSGPUCudaLTSVersionSuffix).
const CUDA_LTS: GpuDriver =
    GpuDriver { version: "580.159.04", driver_type: "cuda-lts", image_sha: "20260629214430" };
/// The converged CUDA/GRID driver of the A10 sizes (gpu.go NvidiaGridDriverVersion).
const GRID: GpuDriver = GpuDriver { version: "570.211.01", driver_type: "grid", image_sha: "20260522192315" };
/// RTX PRO 6000 Blackwell sizes (gpu.go NvidiaGridV20DriverVersion).
const GRID_V20: GpuDriver =
    GpuDriver { version: "595.58.03", driver_type: "grid-v20", image_sha: "20260609172331" };

/// Sizes on the converged (GRID) driver (gpu.go ConvergedGPUDriverSizes).
const GRID_SIZES: &[&str] = &[
    "standard_nv6ads_a10_v5",
    "standard_nv12ads_a10_v5",
    "standard_nv18ads_a10_v5",
    "standard_nv36ads_a10_v5",
    "standard_nv72ads_a10_v5",
    "standard_nv36adms_a10_v5",
    "standard_nc8ads_a10_v4",
    "standard_nc16ads_a10_v4",
    "standard_nc32ads_a10_v4",
];

use crate::catalog::support::normalize_size as normalize;
pub use crate::catalog::support::{is_nvidia_size, supported_on_os};

/// The driver an NVIDIA size installs.
pub fn driver_for(size: &str) -> GpuDriver {
    let size = normalize(size);
    if size.contains("rtxpro6000bse") {
        GRID_V20
    } else if GRID_SIZES.contains(&size.as_str()) {
        GRID
    } else if size.starts_with("standard_nc") && !size.contains("_v") {
        CUDA_NCV1
    } else {
        CUDA_LTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_sizes_are_known_and_others_are_not() {
        assert!(is_nvidia_size("Standard_NC6s_v3"));
        assert!(is_nvidia_size("Standard_NC24ads_A100_v4"));
        assert!(is_nvidia_size("standard_nc24ads_a100_v4_Promo"));
        assert!(!is_nvidia_size("Standard_D4s_v5"));
        assert!(supported_on_os("Standard_NC24ads_A100_v4", "azurelinux3"));
        assert!(!is_nvidia_size("Standard_NV4ads_V710_v5"), "AMD sizes get no NVIDIA driver");
    }

    #[test]
    fn driver_follows_the_size_family() {
        assert_eq!(driver_for("Standard_NV36ads_A10_v5").driver_type, "grid");
        assert_eq!(driver_for("Standard_NC6").driver_type, "cuda");
        assert_eq!(driver_for("Standard_NC6s_v3"), CUDA_LTS);
        assert_eq!(driver_for("Standard_NC24lds_xl_RTXPRO6000BSE_v6").driver_type, "grid-v20");
    }
}
