//! Which AKS node images an AKSNodeClass needs and which published version of each to use. Pure.
//!
//! Owns upstream's image-family table (provider `pkg/providers/imagefamily/ubuntu_2204.go`,
//! `ubuntu_2404.go`, `azlinux.go`, `azlinux3.go`, `resolver.go`) for the community
//! galleries AKS publishes to (the self-hosted path; the AKS-internal SIG path is not used):
//! - the distro a family resolves to for a Kubernetes version (`Ubuntu`: 22.04 below 1.34, 24.04 from
//!   1.34; `AzureLinux`: 2 below 1.32, 3 from 1.32);
//! - its image definitions in priority order (gen2 amd64, gen1 amd64, gen2 arm64), each with the
//!   requirements a VM size must meet to boot it;
//! - for a trusted-launch class, the one trusted-launch definition instead (`2204gen2TLcontainerd`,
//!   `2404gen2TLcontainerd`, `V2gen2TL`, `V3gen2TL`: gen2 amd64 only; AKS publishes no arm64 or gen1
//!   trusted-launch image), with `Ubuntu` pinned to 22.04 as upstream `defaultUbuntu` does;
//! - the newest usable version of a definition, the community-gallery image ID, and which of a class's
//!   status images a VM size boots.

use crate::apis::aksnodeclass::{FipsMode, ImageFamily, NodeImage};
use crate::apis::common::{NodeSelectorRequirementWithMinValues, Operator};
use crate::apis::AKSNodeClass;
use crate::catalog::sku::{Arch, SkuRecord};
use crate::catalog::NodeSecurity;
use crate::model::labels::{LABEL_ARCH, LABEL_SKU_HYPERV_GENERATION};

/// Public name of the community gallery AKS publishes its Ubuntu node images to.
pub const UBUNTU_GALLERY: &str = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2";
/// Public name of the community gallery AKS publishes its Azure Linux node images to.
pub const AZURE_LINUX_GALLERY: &str = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b";

/// The first Kubernetes minor (1.x) whose default Ubuntu is 24.04 (upstream `UseUbuntu2404`).
const UBUNTU_2404_FROM_MINOR: u64 = 34;
/// The first Kubernetes minor (1.x) that gets Azure Linux 3 (upstream `UseAzureLinux3`).
const AZURE_LINUX_3_FROM_MINOR: u64 = 32;

/// The OS release a class's nodes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distro {
    Ubuntu2204,
    Ubuntu2404,
    AzureLinux2,
    AzureLinux3,
}

/// One image definition of a community gallery and the sizes that can boot it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ImageDefinition {
    pub gallery: &'static str,
    pub definition: &'static str,
    pub arch: Arch,
    /// Hyper-V generation, `1` or `2` (the `sku-hyperv-generation` label values).
    pub hyperv_generation: &'static str,
}

/// Why a class has no images this controller can resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageFamilyError {
    /// AKS publishes FIPS images only to its internal shared image galleries (upstream's USE_SIG mode),
    /// never to the community galleries.
    #[error("FIPS images are published only to the AKS shared image galleries, which this controller does not use; set fipsMode: Disabled")]
    FipsRequiresSig,
}

impl ImageFamilyError {
    /// Static category: the ImagesReady reason (upstream's where it has one).
    pub fn category(&self) -> &'static str {
        match self {
            ImageFamilyError::FipsRequiresSig => "SIGRequiredForFIPS",
        }
    }
}

/// The distro of `family` on a cluster at `kubernetes_version` (`1.34.2`). An unparseable version gets
/// the older release, as upstream does.
pub fn distro(family: ImageFamily, kubernetes_version: &str) -> Distro {
    let minor = minor_version(kubernetes_version);
    match family {
        ImageFamily::Ubuntu if minor.is_some_and(|m| m >= UBUNTU_2404_FROM_MINOR) => Distro::Ubuntu2404,
        ImageFamily::Ubuntu | ImageFamily::Ubuntu2204 => Distro::Ubuntu2204,
        ImageFamily::Ubuntu2404 => Distro::Ubuntu2404,
        ImageFamily::AzureLinux if minor.is_some_and(|m| m >= AZURE_LINUX_3_FROM_MINOR) => {
            Distro::AzureLinux3
        }
        ImageFamily::AzureLinux => Distro::AzureLinux2,
    }
}

/// The minor of a 1.x version (`v1.33.1+k3s1` → 33); None for anything else.
pub fn minor_version(version: &str) -> Option<u64> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let major = parts.next()?;
    let minor = parts.next()?;
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    (major == "1").then(|| digits.parse().ok()).flatten()
}

/// The image definitions of a distro, first match wins: gen2 first because most sizes boot both
/// generations and gen2 is what AKS uses on them.
pub fn distro_definitions(distro: Distro) -> [ImageDefinition; 3] {
    let (gallery, names) = match distro {
        Distro::Ubuntu2204 => {
            (UBUNTU_GALLERY, ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"])
        }
        Distro::Ubuntu2404 => {
            (UBUNTU_GALLERY, ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"])
        }
        Distro::AzureLinux2 => (AZURE_LINUX_GALLERY, ["V2gen2", "V2", "V2gen2arm64"]),
        Distro::AzureLinux3 => (AZURE_LINUX_GALLERY, ["V3gen2", "V3", "V3gen2arm64"]),
    };
    let [gen2, gen1, arm64] = names;
    [
        ImageDefinition { gallery, definition: gen2, arch: Arch::Amd64, hyperv_generation: "2" },
        ImageDefinition { gallery, definition: gen1, arch: Arch::Amd64, hyperv_generation: "1" },
        ImageDefinition { gallery, definition: arm64, arch: Arch::Arm64, hyperv_generation: "2" },
    ]
}

/// The trusted-launch definition of a distro. A VM booting it must be created with security type
/// TrustedLaunch (Azure refuses it otherwise), and the image is gen2 amd64 only.
pub fn trusted_launch_definition(distro: Distro) -> ImageDefinition {
    let (gallery, definition) = match distro {
        Distro::Ubuntu2204 => (UBUNTU_GALLERY, "2204gen2TLcontainerd"),
        Distro::Ubuntu2404 => (UBUNTU_GALLERY, "2404gen2TLcontainerd"),
        Distro::AzureLinux2 => (AZURE_LINUX_GALLERY, "V2gen2TL"),
        Distro::AzureLinux3 => (AZURE_LINUX_GALLERY, "V3gen2TL"),
    };
    ImageDefinition { gallery, definition, arch: Arch::Amd64, hyperv_generation: "2" }
}

/// The definitions a class needs on a cluster at `kubernetes_version`, in priority order.
pub fn class_definitions(
    class: &AKSNodeClass,
    kubernetes_version: &str,
) -> Result<Vec<ImageDefinition>, ImageFamilyError> {
    if class.spec.fips_mode == Some(FipsMode::Fips) {
        return Err(ImageFamilyError::FipsRequiresSig);
    }
    let family = class.spec.image_family.unwrap_or_default();
    if NodeSecurity::from_spec(class.spec.security.as_ref()).trusted_launch.is_some() {
        // Upstream `defaultUbuntu`: trusted launch keeps the default family on 22.04 at every version.
        let distro = match family {
            ImageFamily::Ubuntu => Distro::Ubuntu2204,
            _ => distro(family, kubernetes_version),
        };
        return Ok(vec![trusted_launch_definition(distro)]);
    }
    Ok(distro_definitions(distro(family, kubernetes_version)).to_vec())
}

/// One version of an image definition as the gallery lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedVersion {
    /// `202506.02.0`.
    pub name: String,
    /// Seconds since the Unix epoch; None when the gallery did not say.
    pub published: Option<i64>,
    /// The publisher's "do not pick as latest" flag.
    pub exclude_from_latest: bool,
}

/// The version to use: the latest published (upstream picks the newest `publishedDate`), skipping those
/// the publisher excluded from "latest"; equal dates fall back to the version number, compared part by
/// part as numbers (`202506.10.0` > `202506.9.0`).
pub fn newest(versions: &[PublishedVersion]) -> Option<&PublishedVersion> {
    versions
        .iter()
        .filter(|v| !v.exclude_from_latest)
        .max_by(|a, b| a.published.cmp(&b.published).then_with(|| version_order(&a.name, &b.name)))
}

fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |v: &str| -> Vec<(u64, String)> {
        v.split('.').map(|p| (p.parse().unwrap_or(0), p.to_string())).collect()
    };
    parts(a).cmp(&parts(b))
}

/// `/CommunityGalleries/<gallery>/images/<definition>/versions/<version>`, the form VM creates take in
/// `imageReference.communityGalleryImageId`.
pub fn community_image_id(gallery: &str, definition: &str, version: &str) -> String {
    format!("/CommunityGalleries/{gallery}/images/{definition}/versions/{version}")
}

/// The `(gallery, definition, version)` of a community-gallery image ID; None for other IDs.
pub fn parse_community_image_id(id: &str) -> Option<(&str, &str, &str)> {
    let segments: Vec<&str> = id.split('/').collect();
    match segments.as_slice() {
        ["", cg, gallery, images, definition, versions, version]
            if cg.eq_ignore_ascii_case("CommunityGalleries")
                && images.eq_ignore_ascii_case("images")
                && versions.eq_ignore_ascii_case("versions") =>
        {
            Some((gallery, definition, version))
        }
        _ => None,
    }
}

/// The status entry of a definition at `version`, with requirements sorted by key length then key, as
/// upstream writes them.
pub fn node_image(definition: &ImageDefinition, version: &str) -> NodeImage {
    let requirement = |key: &str, value: &str| NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values: vec![value.to_string()],
        min_values: None,
    };
    NodeImage {
        id: community_image_id(definition.gallery, definition.definition, version),
        requirements: vec![
            requirement(LABEL_ARCH, definition.arch.as_str()),
            requirement(LABEL_SKU_HYPERV_GENERATION, definition.hyperv_generation),
        ],
    }
}

/// The first image in `images` (priority order) that a size boots: its arch and one of its Hyper-V
/// generations must meet the image's requirements (upstream `ResolveNodeImageFromNodeClass`). A size
/// whose generations the catalog does not record is taken to boot any generation: such sizes are the
/// recent ones, all gen2-capable, and gen2 images come first.
pub fn image_for<'a>(images: &'a [NodeImage], sku: &SkuRecord) -> Option<&'a NodeImage> {
    let generations = sku.hyperv_generation_numbers();
    images.iter().find(|image| {
        let Ok(requirements) = crate::apis::requirements::from_api(&image.requirements) else {
            return false;
        };
        // Bound to a name so the iterator borrowing `requirements` is dropped before it.
        let fits = requirements.iter().all(|r| match r.key() {
            LABEL_ARCH => r.admits(Some(sku.arch.as_str())),
            LABEL_SKU_HYPERV_GENERATION => {
                generations.is_empty() || generations.iter().any(|g| r.admits(Some(g)))
            }
            // Keys this controller never writes: the size has no such label.
            _ => r.admits(None),
        });
        fits
    })
}

#[cfg(test)]
#[path = "imagefamily_tests.rs"]
mod tests;
