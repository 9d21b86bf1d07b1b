//! What Compute checks of a VM create's `securityProfile`, so tests prove the launcher's wiring:
//! - `encryptionAtHost: true` on a size whose SKU entry says `EncryptionAtHostSupported: False`;
//! - `securityType: TrustedLaunch` on a size that disables trusted launch;
//! - a trusted-launch VM booting an image that is not a trusted-launch image, and a trusted-launch image
//!   booted by a VM without `securityType: TrustedLaunch` (Azure refuses both: the image definition's
//!   `SecurityType` feature must match the VM);
//! - `uefiSettings` without `securityType` (Azure ignores them silently; the fake refuses, because a
//!   launcher sending them meant trusted launch).
//!
//! Capabilities come from the same rule the fake's SKU list reports (`skus`). Codes and messages follow
//! the shape of Compute's `InvalidParameter` / `BadRequest` answers.

use karpenter_azure::catalog::SkuRecord;
use serde_json::Value;

use super::gallery::GalleryImage;
use super::skus;
use super::wire::ArmError;

/// Refuses a create whose security profile the size or image cannot take.
pub fn check_vm_security(
    body: &Value,
    sku: &SkuRecord,
    image: Option<&GalleryImage>,
) -> Result<(), ArmError> {
    let profile = body.pointer("/properties/securityProfile");
    let field = |name: &str| profile.and_then(|p| p.get(name));
    let encryption_at_host = field("encryptionAtHost").and_then(Value::as_bool) == Some(true);
    let security_type = field("securityType").and_then(Value::as_str).unwrap_or("Standard");
    let trusted_launch = security_type.eq_ignore_ascii_case("TrustedLaunch");
    let size = &sku.name;
    if encryption_at_host && !skus::encryption_at_host_supported(sku) {
        return Err(ArmError::new(
            400,
            "InvalidParameter",
            &format!("The VM size '{size}' does not support 'securityProfile.encryptionAtHost'. Please choose a VM size that supports encryption at host; see https://aka.ms/EncryptionAtHost."),
        ));
    }
    if !trusted_launch && field("uefiSettings").is_some() {
        return Err(ArmError::new(
            400,
            "InvalidParameter",
            "'securityProfile.uefiSettings' can only be set when 'securityProfile.securityType' is 'TrustedLaunch' or 'ConfidentialVM'.",
        ));
    }
    if trusted_launch && skus::trusted_launch_disabled(sku) {
        return Err(ArmError::new(
            400,
            "BadRequest",
            &format!("The VM size '{size}' is not supported for the security type 'TrustedLaunch'. For the list of supported sizes, see https://aka.ms/TrustedLaunch."),
        ));
    }
    let Some(image) = image else { return Ok(()) };
    match (trusted_launch, image.trusted_launch) {
        (true, false) => Err(ArmError::new(
            400,
            "BadRequest",
            &format!("Use of TrustedLaunch setting is not supported for the provided image '{}'. Please select a Trusted Launch supported Gen2 OS image.", image.definition),
        )),
        (false, true) => Err(ArmError::new(
            400,
            "InvalidParameter",
            &format!("The image '{}' has security type 'TrustedLaunch'; a VM created from it must set 'securityProfile.securityType' to 'TrustedLaunch' (found '{security_type}').", image.definition),
        )),
        _ => Ok(()),
    }
}
