//! Fault injection: what can go wrong, which requests or VM creates it hits, and the exact ARM error each
//! fault produces.
//!
//! A `Fault` is injected through `FakeArm::inject` or `POST /_admin/faults` (same JSON, tagged by `kind`):
//!
//! ```json
//! {"kind":"capacity","error":"ZonalAllocationFailed","target":{"sku":"Standard_D4s_v5","zone":"1"},"delivery":"async","times":1}
//! {"kind":"quota","scope":"family","limit":10}
//! {"kind":"throttle","requests":2,"retry_after_secs":1,"path_prefix":"/subscriptions/sub/resourceGroups"}
//! {"kind":"server_error","requests":1}
//! {"kind":"hang","requests":1,"secs":120}
//! {"kind":"slow_provisioning","delay_ms":3000,"target":{"priority":"Spot"}}
//! ```
//!
//! Capacity faults without `times` and quota faults stay until `clear_faults`; request faults count down.

use serde::{Deserialize, Serialize};

use super::wire::ArmError;

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// VM creates matching `target` fail with a capacity or availability error.
    Capacity {
        error: CreateError,
        #[serde(default)]
        target: Target,
        #[serde(default)]
        delivery: Delivery,
        /// How many creates fail; None = every matching create until cleared.
        #[serde(default)]
        times: Option<u32>,
    },
    /// Core quota: a create fails when the cores of live VMs in scope plus the new VM's exceed `limit`.
    Quota {
        scope: QuotaScope,
        limit: u32,
        #[serde(default)]
        delivery: Delivery,
    },
    /// The next `requests` ARM requests (those whose path starts with `path_prefix`, if given) get 429.
    Throttle {
        requests: u32,
        retry_after_secs: u64,
        #[serde(default)]
        path_prefix: Option<String>,
    },
    /// The next `requests` ARM requests (optionally filtered by path prefix) get 500.
    ServerError {
        requests: u32,
        #[serde(default)]
        path_prefix: Option<String>,
    },
    /// The next `requests` ARM requests (optionally filtered by path prefix) are answered only after
    /// `secs`: a connection that hangs, as a stuck gateway's does. The answer, when it comes, is the
    /// normal one.
    Hang {
        requests: u32,
        secs: u64,
        #[serde(default)]
        path_prefix: Option<String>,
    },
    /// VM creates matching `target` take `delay_ms` to reach a final state instead of the configured delay.
    SlowProvisioning {
        delay_ms: u64,
        #[serde(default)]
        target: Target,
    },
}

/// The capacity and availability errors Azure returns on VM create (codes as matched by upstream's
/// unavailable-offerings handling, messages as Azure writes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateError {
    ZonalAllocationFailed,
    AllocationFailed,
    SkuNotAvailable,
    OverconstrainedAllocationRequest,
    OverconstrainedZonalAllocationRequest,
    /// Any other error, e.g. `OSProvisioningTimedOut` for a failing LRO.
    Custom {
        status: u16,
        code: String,
        message: String,
    },
}

/// Which VM creates a fault applies to; an absent field matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    #[serde(default)]
    pub sku: Option<String>,
    /// Logical zone ("1") or the Kubernetes form ("eastus-1"); "" targets regional (zone-less) VMs.
    #[serde(default)]
    pub zone: Option<String>,
    /// "Spot" or "Regular".
    #[serde(default)]
    pub priority: Option<String>,
}

/// Whether a create error is returned on the PUT itself or surfaces later as a failed operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The PUT answers with the error status and body; no VM is created.
    #[default]
    Sync,
    /// The PUT answers 201 Creating; the operation then ends `Failed` and the VM's provisioningState is
    /// `Failed`.
    Async,
}

/// What a quota fault counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaScope {
    /// Regular-priority cores per SKU family (`standardDSv5Family`); `family` limits one family only.
    Family {
        #[serde(default)]
        family: Option<String>,
    },
    /// All regular-priority cores in the region.
    Regional,
    /// All spot cores in the region.
    LowPriority,
}

/// A VM create as faults see it.
#[derive(Debug, Clone)]
pub struct CreateAttempt<'a> {
    pub location: &'a str,
    pub sku: &'a str,
    pub family: &'a str,
    pub vcpus: u32,
    /// Logical zone, None when regional.
    pub zone: Option<&'a str>,
    pub spot: bool,
}

impl Target {
    pub fn matches(&self, attempt: &CreateAttempt<'_>) -> bool {
        let sku_ok = self.sku.as_deref().is_none_or(|s| s.eq_ignore_ascii_case(attempt.sku));
        let zone_ok = self.zone.as_deref().is_none_or(|z| {
            let logical = z.rsplit('-').next().unwrap_or(z);
            match attempt.zone {
                Some(zone) => logical == zone,
                None => z.is_empty(),
            }
        });
        let priority_ok =
            self.priority.as_deref().is_none_or(|p| p.eq_ignore_ascii_case("spot") == attempt.spot);
        sku_ok && zone_ok && priority_ok
    }
}

impl CreateError {
    /// The ARM error for this failure on `attempt`. Synchronous allocation failures come back as 409
    /// Conflict, as Compute returns them; the same code and message appear in a failed operation.
    pub fn to_arm(&self, attempt: &CreateAttempt<'_>) -> ArmError {
        const GUIDANCE: &str =
            "Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance";
        match self {
            CreateError::ZonalAllocationFailed => ArmError::new(
                409,
                "ZonalAllocationFailed",
                &format!("Allocation failed. We do not have sufficient capacity for the requested VM size in this zone. {GUIDANCE}"),
            ),
            CreateError::AllocationFailed => ArmError::new(
                409,
                "AllocationFailed",
                &format!("Allocation failed. We do not have sufficient capacity for the requested VM size in this region. {GUIDANCE}"),
            ),
            CreateError::SkuNotAvailable => ArmError::new(
                409,
                "SkuNotAvailable",
                &format!(
                    "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {}' is \
                     currently not available in location '{}'. Please try another size or deploy to a different \
                     location or different zone. See https://aka.ms/azureskunotavailable for details.",
                    attempt.sku, attempt.location
                ),
            ),
            CreateError::OverconstrainedAllocationRequest | CreateError::OverconstrainedZonalAllocationRequest => {
                let code = match self {
                    CreateError::OverconstrainedAllocationRequest => "OverconstrainedAllocationRequest",
                    _ => "OverconstrainedZonalAllocationRequest",
                };
                ArmError::new(
                    409,
                    code,
                    &format!(
                        "Allocation failed. VM(s) with the following constraints cannot be allocated, because the \
                         condition is too restrictive. Please remove some constraints and try again. Constraints \
                         applied are: - VM Size. {GUIDANCE}"
                    ),
                )
            }
            CreateError::Custom { status, code, message } => ArmError::new(*status, code, message),
        }
    }
}

impl QuotaScope {
    /// Whether a live VM's cores count against this scope for `attempt`.
    pub fn counts(&self, attempt: &CreateAttempt<'_>, vm_family: &str, vm_spot: bool) -> bool {
        match self {
            QuotaScope::Family { .. } => !vm_spot && vm_family == attempt.family,
            QuotaScope::Regional => !vm_spot,
            QuotaScope::LowPriority => vm_spot,
        }
    }

    /// Whether the scope limits `attempt` at all.
    pub fn applies_to(&self, attempt: &CreateAttempt<'_>) -> bool {
        match self {
            QuotaScope::Family { family } => {
                !attempt.spot && family.as_deref().is_none_or(|f| f.eq_ignore_ascii_case(attempt.family))
            }
            QuotaScope::Regional => !attempt.spot,
            QuotaScope::LowPriority => attempt.spot,
        }
    }

    /// Azure's quota error: `OperationNotAllowed` with the limit, usage and the cores the create needs
    /// (upstream parses "Current Limit: 0" to pick a longer unavailability TTL).
    pub fn to_arm(&self, attempt: &CreateAttempt<'_>, limit: u32, usage: u32) -> ArmError {
        let quota_name = match self {
            QuotaScope::Family { .. } => format!("{} Cores", attempt.family),
            QuotaScope::Regional => "Total Regional Cores".to_string(),
            QuotaScope::LowPriority => "Low Priority Cores".to_string(),
        };
        let required = attempt.vcpus;
        ArmError::new(
            409,
            "OperationNotAllowed",
            &format!(
                "Operation could not be completed as it results in exceeding approved {quota_name} quota. \
                 Additional details - Deployment Model: Resource Manager, Location: {}, Current Limit: {limit}, \
                 Current Usage: {usage}, Additional Required: {required}, (Minimum) New Limit Required: {}. \
                 Submit a request for Quota increase at https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView \
                 by specifying parameters listed in the 'Details' section for deployment to succeed. Please read more \
                 about quota limits at https://docs.microsoft.com/en-us/azure/azure-supportability/per-vm-quota-requests",
                attempt.location,
                usage + required
            ),
        )
    }
}

/// How long to hold a request to `path` before answering it, if a hang fault matches; consumes one use.
pub fn take_hang(faults: &mut Vec<Fault>, path: &str) -> Option<std::time::Duration> {
    let lower = path.to_ascii_lowercase();
    let index = faults.iter().position(|fault| match fault {
        Fault::Hang { requests, path_prefix, .. } => {
            *requests > 0 && path_prefix.as_deref().is_none_or(|p| lower.starts_with(&p.to_ascii_lowercase()))
        }
        _ => false,
    })?;
    let Fault::Hang { requests, secs, .. } = &mut faults[index] else { return None };
    *requests -= 1;
    let hold = std::time::Duration::from_secs(*secs);
    faults.retain(|fault| !matches!(fault, Fault::Hang { requests: 0, .. }));
    Some(hold)
}

/// A request-level fault (429/500) that matches `path`, if any is left; consumes one use.
pub fn take_request_fault(faults: &mut Vec<Fault>, path: &str) -> Option<ArmRequestFault> {
    let lower = path.to_ascii_lowercase();
    let prefix_ok = |prefix: &Option<String>| {
        prefix.as_deref().is_none_or(|p| lower.starts_with(&p.to_ascii_lowercase()))
    };
    let index = faults.iter().position(|fault| match fault {
        Fault::Throttle { requests, path_prefix, .. } | Fault::ServerError { requests, path_prefix } => {
            *requests > 0 && prefix_ok(path_prefix)
        }
        _ => false,
    })?;
    let outcome = match &mut faults[index] {
        Fault::Throttle { requests, retry_after_secs, .. } => {
            *requests -= 1;
            ArmRequestFault::Throttled { retry_after_secs: *retry_after_secs }
        }
        Fault::ServerError { requests, .. } => {
            *requests -= 1;
            ArmRequestFault::ServerError
        }
        _ => unreachable!("position matched a request fault"),
    };
    faults.retain(|fault| {
        !matches!(fault, Fault::Throttle { requests: 0, .. } | Fault::ServerError { requests: 0, .. })
    });
    Some(outcome)
}

/// What a request fault does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmRequestFault {
    Throttled { retry_after_secs: u64 },
    ServerError,
}

/// The first capacity fault matching `attempt`, consuming one of its uses.
pub fn take_capacity_fault(
    faults: &mut Vec<Fault>,
    attempt: &CreateAttempt<'_>,
) -> Option<(ArmError, Delivery)> {
    let index = faults.iter().position(|fault| match fault {
        Fault::Capacity { target, times, .. } => times.is_none_or(|t| t > 0) && target.matches(attempt),
        _ => false,
    })?;
    let Fault::Capacity { error, delivery, times, .. } = &mut faults[index] else {
        unreachable!("position matched a capacity fault")
    };
    let found = (error.to_arm(attempt), *delivery);
    if let Some(left) = times {
        *left -= 1;
        if *left == 0 {
            faults.remove(index);
        }
    }
    Some(found)
}

/// The provisioning delay a slow-provisioning fault sets for `attempt`, if any.
pub fn provisioning_delay_ms(faults: &[Fault], attempt: &CreateAttempt<'_>) -> Option<u64> {
    faults.iter().find_map(|fault| match fault {
        Fault::SlowProvisioning { delay_ms, target } if target.matches(attempt) => Some(*delay_ms),
        _ => None,
    })
}
