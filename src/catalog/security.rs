//! Node security of an AKSNodeClass — encryption at host and trusted launch (`spec.security`, upstream
//! `pkg/apis/v1beta1/aksnodeclass.go`) — and which VM sizes can honour it (upstream `instancetypes.go`
//! `isInstanceTypeSupportedByEncryptionAtHost` / `...ByTrustedLaunch`). Pure.
//!
//! What a size can do comes from the Resource SKUs API capabilities `EncryptionAtHostSupported` and
//! `TrustedLaunchDisabled`. The embedded catalog has neither, so until the live list arrives (or when a
//! size's entry lacks the capability) the rules for "unknown" are:
//! - encryption at host unknown → not supported: Azure refuses a create that asks for it on a size
//!   without it, so offering the size would only turn into failed launches (upstream does the same: a
//!   missing capability is "False"). A class that requires encryption at host therefore launches only
//!   once the live SKU list is in.
//! - trusted launch unknown → allowed only when the size lists Hyper-V generation 2: trusted launch is a
//!   gen2 feature, and nearly every gen2 size supports it. A size known not to disable it is allowed
//!   unless it is known to be gen1-only.

use super::sku::SkuRecord;
use crate::apis::aksnodeclass::Security;

/// The security settings a class's VMs are created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeSecurity {
    /// `securityProfile.encryptionAtHost`.
    pub encryption_at_host: bool,
    /// Some when the VM is created with security type TrustedLaunch.
    pub trusted_launch: Option<UefiSettings>,
}

/// `securityProfile.uefiSettings` of a trusted-launch VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UefiSettings {
    pub secure_boot: bool,
    pub vtpm: bool,
}

/// Why a size cannot run a class's VMs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityError {
    #[error(
        "VM size {0} does not support encryption at host (or the Resource SKUs API has not said it does)"
    )]
    EncryptionAtHostUnsupported(String),
    #[error("VM size {0} cannot run trusted launch (it disables it or is not Hyper-V generation 2)")]
    TrustedLaunchUnsupported(String),
}

impl SecurityError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            SecurityError::EncryptionAtHostUnsupported(_) => "EncryptionAtHostUnsupported",
            SecurityError::TrustedLaunchUnsupported(_) => "TrustedLaunchUnsupported",
        }
    }
}

impl NodeSecurity {
    /// The settings of `spec.security`. As upstream, trusted launch is on when either `vtpm` or
    /// `secureBoot` is true, and an unset one of the two is false in the UEFI settings.
    pub fn from_spec(security: Option<&Security>) -> NodeSecurity {
        let Some(security) = security else { return NodeSecurity::default() };
        let uefi = security
            .trusted_launch
            .as_ref()
            .map(|t| UefiSettings { secure_boot: t.secure_boot == Some(true), vtpm: t.vtpm == Some(true) });
        NodeSecurity {
            encryption_at_host: security.encryption_at_host == Some(true),
            trusted_launch: uefi.filter(|u| u.secure_boot || u.vtpm),
        }
    }

    /// Whether VMs of `sku` can be created with these settings.
    pub fn check(&self, sku: &SkuRecord) -> Result<(), SecurityError> {
        if self.encryption_at_host && !supports_encryption_at_host(sku) {
            return Err(SecurityError::EncryptionAtHostUnsupported(sku.name.clone()));
        }
        if self.trusted_launch.is_some() && !allows_trusted_launch(sku) {
            return Err(SecurityError::TrustedLaunchUnsupported(sku.name.clone()));
        }
        Ok(())
    }
}

/// Encryption at host only where the SKU list says so; unknown is "no" (see the module doc).
pub fn supports_encryption_at_host(sku: &SkuRecord) -> bool {
    sku.encryption_at_host_supported == Some(true)
}

/// Trusted launch unless the size disables it; unknown is "only on gen2" (see the module doc).
pub fn allows_trusted_launch(sku: &SkuRecord) -> bool {
    let generations = sku.hyperv_generation_numbers();
    let gen2 = generations.iter().any(|g| g == "2");
    match sku.trusted_launch_disabled {
        Some(true) => false,
        Some(false) => gen2 || generations.is_empty(),
        None => gen2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::aksnodeclass::TrustedLaunch;
    use crate::catalog::embedded_sku;

    fn sku(name: &str, eah: Option<bool>, tl_disabled: Option<bool>, generations: Option<&str>) -> SkuRecord {
        SkuRecord {
            encryption_at_host_supported: eah,
            trusted_launch_disabled: tl_disabled,
            hyperv_generations: generations.map(|g| g.split(',').map(str::to_string).collect()),
            ..embedded_sku(name).unwrap().clone()
        }
    }

    fn security(eah: Option<bool>, vtpm: Option<bool>, secure_boot: Option<bool>) -> Security {
        Security { encryption_at_host: eah, trusted_launch: Some(TrustedLaunch { vtpm, secure_boot }) }
    }

    #[test]
    fn either_uefi_setting_turns_trusted_launch_on_and_unset_is_false() {
        assert_eq!(NodeSecurity::from_spec(None), NodeSecurity::default());
        let vtpm_only = NodeSecurity::from_spec(Some(&security(None, Some(true), None)));
        assert_eq!(vtpm_only.trusted_launch, Some(UefiSettings { secure_boot: false, vtpm: true }));
        assert!(!vtpm_only.encryption_at_host);
        let both = NodeSecurity::from_spec(Some(&security(Some(true), Some(true), Some(true))));
        assert_eq!(
            both,
            NodeSecurity {
                encryption_at_host: true,
                trusted_launch: Some(UefiSettings { secure_boot: true, vtpm: true })
            }
        );
        let off = NodeSecurity::from_spec(Some(&security(Some(false), Some(false), None)));
        assert_eq!(off, NodeSecurity::default(), "both false is not trusted launch");
    }

    #[test]
    fn encryption_at_host_needs_the_capability_and_unknown_is_no() {
        let wants = NodeSecurity { encryption_at_host: true, trusted_launch: None };
        assert!(wants.check(&sku("Standard_D4s_v5", Some(true), None, None)).is_ok());
        let no = wants.check(&sku("Standard_D4s_v5", Some(false), None, None)).unwrap_err();
        assert_eq!(no.category(), "EncryptionAtHostUnsupported");
        assert!(wants.check(&sku("Standard_D4s_v5", None, None, None)).is_err(), "unknown: not offered");
        assert!(NodeSecurity::default().check(&sku("Standard_D4s_v5", Some(false), None, None)).is_ok());
    }

    #[test]
    fn trusted_launch_needs_gen2_and_no_disable_flag() {
        let wants = NodeSecurity::from_spec(Some(&security(None, None, Some(true))));
        let check =
            |tl_disabled, generations| wants.check(&sku("Standard_D4s_v5", None, tl_disabled, generations));
        assert!(check(Some(false), Some("V1,V2")).is_ok());
        assert!(check(None, Some("V2")).is_ok(), "unknown capability, gen2: allowed");
        assert_eq!(check(None, Some("V1")).unwrap_err().category(), "TrustedLaunchUnsupported");
        assert!(check(None, None).is_err(), "unknown capability and generation: not offered");
        assert!(check(Some(false), None).is_ok(), "known to allow it, generation unknown");
        assert!(check(Some(false), Some("V1")).is_err(), "gen1-only cannot, whatever the flag");
        assert!(check(Some(true), Some("V1,V2")).is_err());
    }
}
