//! Deterministic Azure resource names and provider IDs.
//!
//! Owns the `aks-<claim>` naming shared by the VM, its NIC and its OS disk (upstream provider
//! instance/vminstance.go), which is what makes a retried create find what an earlier attempt made, and
//! the providerID form `azure:///subscriptions/<sub>/resourceGroups/<rg lower-cased>/providers/
//! Microsoft.Compute/virtualMachines/<name>` that the kubelet's cloud provider also writes on the Node.

/// Prefix of every resource we create (upstream: `aks-` + NodeClaim name).
pub const RESOURCE_PREFIX: &str = "aks-";
const PROVIDER_ID_SCHEME: &str = "azure://";

/// Errors of provider-ID parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    #[error("not an Azure VM provider ID: {0:?}")]
    NotAVmProviderId(String),
}

impl NamingError {
    pub fn category(&self) -> &'static str {
        match self {
            NamingError::NotAVmProviderId(_) => "InvalidProviderID",
        }
    }
}

/// The name of the VM, NIC and OS disk of a NodeClaim.
pub fn resource_name(claim_name: &str) -> String {
    format!("{RESOURCE_PREFIX}{claim_name}")
}

/// The NodeClaim a resource belongs to, if it is named as ours.
pub fn claim_name(resource_name: &str) -> Option<&str> {
    resource_name.strip_prefix(RESOURCE_PREFIX).filter(|rest| !rest.is_empty())
}

/// The ARM path of the resource group's VMs (Virtual Machines - List); a VM's ID is under it.
pub fn vm_collection(subscription: &str, resource_group: &str) -> String {
    format!("/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Compute/virtualMachines")
}

/// The ARM ID of a VM.
pub fn vm_id(subscription: &str, resource_group: &str, vm_name: &str) -> String {
    format!("{}/{vm_name}", vm_collection(subscription, resource_group))
}

/// The ARM path of the resource group's NICs (Network Interfaces - List); a NIC's ID is under it.
pub fn nic_collection(subscription: &str, resource_group: &str) -> String {
    format!("/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network/networkInterfaces")
}

/// The ARM ID of a NIC.
pub fn nic_id(subscription: &str, resource_group: &str, nic_name: &str) -> String {
    format!("{}/{nic_name}", nic_collection(subscription, resource_group))
}

/// The providerID of a VM; the resource group is lower-cased as the Azure cloud provider does, so the
/// value matches what the kubelet registers.
pub fn provider_id(subscription: &str, resource_group: &str, vm_name: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}{}", vm_id(subscription, &resource_group.to_ascii_lowercase(), vm_name))
}

/// The parts of a VM providerID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmRef {
    pub subscription: String,
    pub resource_group: String,
    pub vm_name: String,
}

/// The NodeClaim a VM providerID names (its VM is `aks-<claim>`), if it is one of ours.
pub fn claim_of_provider_id(provider_id: &str) -> Option<String> {
    let vm = parse_provider_id(provider_id).ok()?;
    claim_name(&vm.vm_name).map(str::to_string)
}

/// Parses a VM providerID (segment names are matched case-insensitively, as ARM IDs are).
pub fn parse_provider_id(provider_id: &str) -> Result<VmRef, NamingError> {
    let bad = || NamingError::NotAVmProviderId(provider_id.to_string());
    let id = provider_id.strip_prefix(PROVIDER_ID_SCHEME).ok_or_else(bad)?;
    let parts: Vec<&str> = id.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        [subs, sub, rgs, rg, providers, ns, vms, name]
            if subs.eq_ignore_ascii_case("subscriptions")
                && rgs.eq_ignore_ascii_case("resourceGroups")
                && providers.eq_ignore_ascii_case("providers")
                && ns.eq_ignore_ascii_case("Microsoft.Compute")
                && vms.eq_ignore_ascii_case("virtualMachines")
                && !sub.is_empty()
                && !rg.is_empty()
                && !name.is_empty() =>
        {
            Ok(VmRef {
                subscription: sub.to_string(),
                resource_group: rg.to_string(),
                vm_name: name.to_string(),
            })
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(resource_name("default-x7k2p"), "aks-default-x7k2p");
        assert_eq!(claim_name("aks-default-x7k2p"), Some("default-x7k2p"));
        assert_eq!(claim_name("aks-"), None);
        assert_eq!(claim_name("other"), None);
    }

    #[test]
    fn provider_id_lowercases_the_resource_group_and_parses_back() {
        let id = provider_id("sub", "MC_rg_Cluster_eastus", "aks-default-a");
        assert_eq!(
            id,
            "azure:///subscriptions/sub/resourceGroups/mc_rg_cluster_eastus/providers/Microsoft.Compute/virtualMachines/aks-default-a"
        );
        let parsed = parse_provider_id(&id).unwrap();
        assert_eq!(parsed.vm_name, "aks-default-a");
        assert_eq!(parsed.resource_group, "mc_rg_cluster_eastus");
        assert_eq!(parsed.subscription, "sub");
    }

    #[test]
    fn foreign_provider_ids_are_refused() {
        for bad in [
            "aws:///us-east-1a/i-123",
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/0",
            "azure:///subscriptions//resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x",
        ] {
            assert!(parse_provider_id(bad).is_err(), "{bad}");
        }
    }
}
