//! Community galleries: `GET /subscriptions/<sub>/providers/Microsoft.Compute/locations/<location>/
//! communityGalleries/<public gallery name>/images/<definition>/versions` in the real list shape
//! (`name`, `location`, `identifier.uniqueId`, `properties.publishedDate` / `endOfLifeDate` /
//! `excludeFromLatest` / `storageProfile`), paged like every list; and the check a VM create makes of its
//! `imageReference.communityGalleryImageId`: the version must be published (or `latest`), and the size
//! must boot the definition's Hyper-V generation and architecture.
//!
//! `FakeArmConfig::default()` publishes AKS's Ubuntu and Azure Linux definitions (gen2, gen1, arm64 and
//! trusted launch for Ubuntu 22.04/24.04 and Azure Linux 2/3), each with [`DEFAULT_VERSIONS`], listed out
//! of date order so a client has to pick the newest itself. The trusted-launch ones carry the
//! `SecurityType=TrustedLaunch` feature that `security` matches against the VM's security type.

use karpenter_azure::catalog::embedded_sku;
use serde_json::{json, Value};

use super::state::{Shared, State};
use super::wire::{self, ArmError, ArmRequest, ArmResponse};

pub const UBUNTU_GALLERY: &str = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2";
pub const AZURE_LINUX_GALLERY: &str = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b";
/// (version, publishedDate) of every default definition.
pub const DEFAULT_VERSIONS: &[(&str, &str)] = &[
    ("202505.20.0", "2025-05-20T08:12:44.1234567+00:00"),
    ("202506.02.0", "2025-06-02T10:01:02.0000000+00:00"),
    ("202501.01.0", "2025-01-01T00:00:00+00:00"),
];
/// The newest of [`DEFAULT_VERSIONS`].
pub const DEFAULT_NEWEST_VERSION: &str = "202506.02.0";

/// One image definition of a community gallery.
#[derive(Debug, Clone, PartialEq)]
pub struct GalleryImage {
    /// The gallery's public name.
    pub gallery: String,
    pub definition: String,
    /// `x64` or `Arm64`.
    pub architecture: String,
    /// `V1` or `V2`.
    pub hyperv_generation: String,
    /// The definition's `SecurityType=TrustedLaunch` feature: only trusted-launch VMs boot it, and a
    /// trusted-launch VM boots only such images (checked by `security`).
    pub trusted_launch: bool,
    pub versions: Vec<GalleryImageVersion>,
}

/// One published version.
#[derive(Debug, Clone, PartialEq)]
pub struct GalleryImageVersion {
    pub name: String,
    /// RFC 3339, as ARM writes it.
    pub published: String,
    pub exclude_from_latest: bool,
}

/// AKS's definitions, each with [`DEFAULT_VERSIONS`].
pub fn default_images() -> Vec<GalleryImage> {
    let ubuntu = ["2204", "2404"].into_iter().flat_map(|release| {
        [
            (format!("{release}gen2containerd"), "x64", "V2", false),
            (format!("{release}containerd"), "x64", "V1", false),
            (format!("{release}gen2arm64containerd"), "Arm64", "V2", false),
            (format!("{release}gen2TLcontainerd"), "x64", "V2", true),
        ]
        .map(|(definition, arch, generation, tl)| (UBUNTU_GALLERY, definition, arch, generation, tl))
    });
    let azure_linux = ["V2", "V3"].into_iter().flat_map(|release| {
        [
            (format!("{release}gen2"), "x64", "V2", false),
            (release.to_string(), "x64", "V1", false),
            (format!("{release}gen2arm64"), "Arm64", "V2", false),
            (format!("{release}gen2TL"), "x64", "V2", true),
        ]
        .map(|(definition, arch, generation, tl)| (AZURE_LINUX_GALLERY, definition, arch, generation, tl))
    });
    let versions: Vec<GalleryImageVersion> = DEFAULT_VERSIONS
        .iter()
        .map(|(name, published)| GalleryImageVersion {
            name: name.to_string(),
            published: published.to_string(),
            exclude_from_latest: false,
        })
        .collect();
    ubuntu
        .chain(azure_linux)
        .map(|(gallery, definition, architecture, generation, trusted_launch)| GalleryImage {
            gallery: gallery.to_string(),
            definition,
            architecture: architecture.to_string(),
            hyperv_generation: generation.to_string(),
            trusted_launch,
            versions: versions.clone(),
        })
        .collect()
}

fn find<'a>(state: &'a State, gallery: &str, definition: &str) -> Option<&'a GalleryImage> {
    state
        .gallery
        .iter()
        .find(|i| i.gallery.eq_ignore_ascii_case(gallery) && i.definition.eq_ignore_ascii_case(definition))
}

/// Community images are replicated per region; elsewhere, and for names that do not exist, ARM answers
/// the same way.
fn not_found() -> ArmError {
    ArmError::new(404, "NotFound", "The entity was not found in this Azure location.")
}

pub fn list_versions(
    shared: &Shared,
    request: &ArmRequest,
    location: &str,
    gallery: &str,
    definition: &str,
) -> ArmResponse {
    let state = shared.lock();
    let image = match find(&state, gallery, definition) {
        Some(image) if location.eq_ignore_ascii_case(&shared.config.location) => image,
        _ => return not_found().into_response(),
    };
    let items: Vec<Value> = image
        .versions
        .iter()
        .map(|v| {
            json!({
                "name": v.name,
                "location": shared.config.location,
                "identifier": {"uniqueId": format!(
                    "/CommunityGalleries/{}/Images/{}/Versions/{}", image.gallery, image.definition, v.name
                )},
                "properties": {
                    "publishedDate": v.published,
                    "excludeFromLatest": v.exclude_from_latest,
                    "storageProfile": {"osDiskImage": {"diskSizeGB": 30, "hostCaching": "ReadOnly"}},
                },
            })
        })
        .collect();
    drop(state);
    wire::list_page(request, &shared.base_url, items, shared.config.list_page_size)
}

/// Adds a version to an existing definition; false when there is no such definition.
pub fn publish(state: &mut State, gallery: &str, definition: &str, version: GalleryImageVersion) -> bool {
    let Some(image) = state
        .gallery
        .iter_mut()
        .find(|i| i.gallery.eq_ignore_ascii_case(gallery) && i.definition.eq_ignore_ascii_case(definition))
    else {
        return false;
    };
    image.versions.push(version);
    true
}

/// What Azure checks of a VM create's community-gallery image; returns the image's definition. Other
/// image references pass (None).
pub fn check_vm_image<'s>(
    state: &'s State,
    body: &Value,
    vm_size: &str,
    location: &str,
) -> Result<Option<&'s GalleryImage>, ArmError> {
    let Some(id) = body.pointer("/properties/storageProfile/imageReference/communityGalleryImageId") else {
        return Ok(None);
    };
    let id = id.as_str().unwrap_or_default();
    let segments: Vec<&str> = id.split('/').collect();
    let missing = || {
        ArmError::new(
            404,
            "GalleryImageNotFound",
            &format!("The gallery image {id} is not available in {location} region. Please contact image owner to replicate to this region, or change your requested region."),
        )
    };
    let ["", cg, gallery, images, definition, versions, version] = segments.as_slice() else {
        return Err(ArmError::new(
            400,
            "InvalidParameter",
            &format!("The value '{id}' of parameter 'imageReference.communityGalleryImageId' is invalid."),
        ));
    };
    let is = |s: &str, expected: &str| s.eq_ignore_ascii_case(expected);
    if !(is(cg, "CommunityGalleries") && is(images, "images") && is(versions, "versions")) {
        return Err(missing());
    }
    let image = find(state, gallery, definition).ok_or_else(missing)?;
    if !is(version, "latest") && !image.versions.iter().any(|v| is(&v.name, version)) {
        return Err(missing());
    }
    let Some(sku) = embedded_sku(vm_size) else { return Ok(Some(image)) };
    if let Some(generations) = &sku.hyperv_generations {
        if !generations.iter().any(|g| is(g, &image.hyperv_generation)) {
            let generation = image.hyperv_generation.trim_start_matches('V');
            return Err(ArmError::new(
                400,
                "BadRequest",
                &format!("The selected VM size '{vm_size}' cannot boot Hypervisor Generation '{generation}'. If this was a Create operation please check that the Hypervisor Generation of the Image matches the Hypervisor Generation of the selected VM Size. If this was an Update operation please select a Hypervisor Generation '{generation}' VM Size. For more information, see https://aka.ms/azuregen2vm"),
            ));
        }
    }
    let size_arch = match sku.arch {
        karpenter_azure::catalog::sku::Arch::Amd64 => "x64",
        karpenter_azure::catalog::sku::Arch::Arm64 => "Arm64",
    };
    if !is(size_arch, &image.architecture) {
        return Err(ArmError::new(
            400,
            "BadRequest",
            &format!("The selected VM size '{vm_size}' cannot boot an image of architecture '{}'; it needs an image of architecture '{size_arch}'.", image.architecture),
        ));
    }
    Ok(Some(image))
}
