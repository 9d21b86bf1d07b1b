//! Classifying ARM errors: which become marks in the unavailable-offerings cache, and which
//! [`CloudError`] each one is.
//!
//! Owns the code/message matching of upstream provider instance/offerings and the
//! azure-sdk-for-go-extensions error matchers. Pure: takes the status, code and message, returns a
//! classification; the provider applies the marks.

use azure_core::error::ErrorKind;

use crate::catalog::UnavailableReason;
use crate::cloud::CloudError;

/// An ARM failure reduced to what classification needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmFailure {
    /// HTTP status; 0 when the error never reached ARM (I/O, credential).
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ArmFailure {
    /// From an SDK error (non-2xx responses carry status and ARM `error.code`).
    pub fn from_sdk(err: &azure_core::Error) -> ArmFailure {
        match err.kind() {
            ErrorKind::HttpResponse { status, error_code } => ArmFailure {
                status: u16::from(*status),
                code: error_code.clone().unwrap_or_default(),
                message: err
                    .as_http_error()
                    .and_then(|e| e.error_message())
                    .map(str::to_string)
                    .unwrap_or_else(|| err.to_string()),
            },
            ErrorKind::Credential => {
                ArmFailure { status: 401, code: "CredentialUnavailable".into(), message: err.to_string() }
            }
            _ => ArmFailure { status: 0, code: String::new(), message: err.to_string() },
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status == 404
    }
}

/// What an ARM error on a VM create means for offerings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityClass {
    /// Mark the offering(s) the reason implies and try another offering next solve.
    Unavailable(UnavailableReason),
    /// Out of regional cores: `headroom` is the quota left (Current Limit − Current Usage) when the
    /// message says it; `limit_zero` when the limit is 0.
    RegionalQuota { headroom: Option<u32>, limit_zero: bool },
}

/// The quota message marker for the family quota (`... approved standardDSv5Family Cores quota`).
const FAMILY_QUOTA_MARKER: &str = "Family Cores quota";
/// The quota message markers for the low-priority (spot) quota.
const LOW_PRIORITY_QUOTA_MARKERS: [&str; 2] = ["Low Priority Cores quota", "LowPriorityCores"];
const REGIONAL_QUOTA_MARKER: &str = "Total Regional Cores quota";
/// Upstream keeps a family with zero quota blocked longer (1h instead of 10m).
const ZERO_LIMIT_MARKER: &str = "Current Limit: 0,";

/// Classifies a VM-create failure as a capacity error, if it is one (upstream provider instance/offerings).
pub fn capacity_class(failure: &ArmFailure) -> Option<CapacityClass> {
    let code = failure.code.as_str();
    let message = failure.message.as_str();
    let unavailable = |reason| Some(CapacityClass::Unavailable(reason));
    match code {
        "ZonalAllocationFailed" => unavailable(UnavailableReason::ZonalAllocationFailed),
        "AllocationFailed" => unavailable(UnavailableReason::AllocationFailed),
        "SkuNotAvailable" => unavailable(UnavailableReason::SkuNotAvailable),
        "OverconstrainedAllocationRequest" | "OverconstrainedZonalAllocationRequest" => {
            unavailable(UnavailableReason::OverconstrainedAllocation)
        }
        "LowPriorityQuota" => unavailable(UnavailableReason::LowPriorityQuota),
        "OperationNotAllowed" | "QuotaExceeded" => {
            if LOW_PRIORITY_QUOTA_MARKERS.iter().any(|m| message.contains(m)) {
                unavailable(UnavailableReason::LowPriorityQuota)
            } else if message.contains(FAMILY_QUOTA_MARKER) {
                let limit_zero = message.contains(ZERO_LIMIT_MARKER);
                unavailable(UnavailableReason::SkuFamilyQuota { limit_zero })
            } else if message.contains(REGIONAL_QUOTA_MARKER) {
                let headroom = quota_number(message, "Current Limit:")
                    .zip(quota_number(message, "Current Usage:"))
                    .map(|(limit, usage)| limit.saturating_sub(usage));
                Some(CapacityClass::RegionalQuota {
                    headroom,
                    limit_zero: message.contains(ZERO_LIMIT_MARKER),
                })
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The number after `label` in a quota message (`... Current Limit: 100, Current Usage: 96, ...`).
fn quota_number(message: &str, label: &str) -> Option<u32> {
    let rest = &message[message.find(label)? + label.len()..];
    rest.trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The `error_code` of a failed VM create in `karpenter_instance_vm_create_failure_total`: the capacity
/// reason it marks, else the category of its [`CloudError`]. Upstream uses the raw ARM code, which a
/// server may make up; these are a fixed set.
pub fn failure_label(failure: &ArmFailure) -> &'static str {
    match capacity_class(failure) {
        Some(CapacityClass::Unavailable(reason)) => reason.category(),
        Some(CapacityClass::RegionalQuota { .. }) => "RegionalQuota",
        None => cloud_error(failure, "").category(),
    }
}

/// Network's refusal to delete (or reuse) a NIC it still reserves for the VM of a failed create.
pub const NIC_RESERVED: &str = "NicReservedForAnotherVm";

/// The [`CloudError`] of a non-capacity ARM failure.
pub fn cloud_error(failure: &ArmFailure, what: &str) -> CloudError {
    let detail = if failure.code.is_empty() {
        format!("{what}: {}", failure.message)
    } else {
        format!("{what}: {} ({})", failure.code, failure.message)
    };
    if failure.code.eq_ignore_ascii_case(NIC_RESERVED) {
        // Network holds the NIC of a failed create for 180 s (Azure/karpenter-provider-azure#92): the same
        // delete succeeds once that is over.
        return CloudError::Transient(detail);
    }
    match failure.status {
        404 => CloudError::NotFound(detail),
        429 => CloudError::Throttled(detail),
        401 | 403 => CloudError::Unauthorized(detail),
        400 | 409 | 422 => CloudError::Invalid(detail),
        _ => CloudError::Transient(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: u16, code: &str, message: &str) -> ArmFailure {
        ArmFailure { status, code: code.into(), message: message.into() }
    }

    #[test]
    fn allocation_codes() {
        use UnavailableReason::*;
        for (code, reason) in [
            ("ZonalAllocationFailed", ZonalAllocationFailed),
            ("AllocationFailed", AllocationFailed),
            ("SkuNotAvailable", SkuNotAvailable),
            ("OverconstrainedZonalAllocationRequest", OverconstrainedAllocation),
            ("LowPriorityQuota", LowPriorityQuota),
        ] {
            assert_eq!(capacity_class(&failure(409, code, "x")), Some(CapacityClass::Unavailable(reason)));
        }
    }

    #[test]
    fn quota_messages() {
        let family = |limit: u32| {
            failure(409, "OperationNotAllowed", &format!(
                "Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: {limit}, Current Usage: 8, Additional Required: 4"
            ))
        };
        assert_eq!(
            capacity_class(&family(0)),
            Some(CapacityClass::Unavailable(UnavailableReason::SkuFamilyQuota { limit_zero: true }))
        );
        assert_eq!(
            capacity_class(&family(10)),
            Some(CapacityClass::Unavailable(UnavailableReason::SkuFamilyQuota { limit_zero: false }))
        );
        let spot = failure(
            409,
            "OperationNotAllowed",
            "exceeding approved Low Priority Cores quota. Current Limit: 3,",
        );
        assert_eq!(
            capacity_class(&spot),
            Some(CapacityClass::Unavailable(UnavailableReason::LowPriorityQuota))
        );
        let regional = failure(409, "OperationNotAllowed", "exceeding approved Total Regional Cores quota.");
        assert_eq!(
            capacity_class(&regional),
            Some(CapacityClass::RegionalQuota { headroom: None, limit_zero: false })
        );
        let detailed = failure(
            409,
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. \
             Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 100, \
             Current Usage: 96, Additional Required: 8, (Minimum) New Limit Required: 104.",
        );
        assert_eq!(
            capacity_class(&detailed),
            Some(CapacityClass::RegionalQuota { headroom: Some(4), limit_zero: false })
        );
        assert_eq!(capacity_class(&failure(409, "OperationNotAllowed", "VM is marked for deletion")), None);
    }

    #[test]
    fn other_errors_by_status() {
        assert_eq!(cloud_error(&failure(429, "TooManyRequests", "slow"), "get").category(), "Throttled");
        assert_eq!(cloud_error(&failure(500, "InternalServerError", "x"), "get").category(), "Transient");
        assert_eq!(cloud_error(&failure(400, "InvalidParameter", "x"), "put").category(), "Invalid");
        assert_eq!(cloud_error(&failure(404, "ResourceNotFound", "x"), "get").category(), "NotFound");
        assert_eq!(cloud_error(&failure(0, "", "connection refused"), "get").category(), "Transient");
        // A reserved NIC is refused with a 400, but the same delete succeeds once the reservation ends.
        let reserved = cloud_error(&failure(400, NIC_RESERVED, "retry after 180 seconds"), "delete");
        assert!(reserved.is_retryable(), "{reserved}");
    }

    #[test]
    fn failure_labels_are_capacity_reasons_or_error_categories() {
        assert_eq!(failure_label(&failure(409, "ZonalAllocationFailed", "x")), "ZonalAllocationFailed");
        let regional = failure(409, "OperationNotAllowed", "exceeding approved Total Regional Cores quota.");
        assert_eq!(failure_label(&regional), "RegionalQuota");
        assert_eq!(failure_label(&failure(400, "MadeUpByTheServer-1234", "x")), "Invalid");
        assert_eq!(failure_label(&failure(503, "", "x")), "Transient");
    }
}
