//! Subnet IDs and which subnet an AKSNodeClass may put its nodes in. Pure.
//!
//! Owns parsing `/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/
//! <vnet>/subnets/<subnet>` and upstream's rules for a class's own `vnetSubnetID` (provider
//! `pkg/controllers/nodeclass/status/subnet.go`): it must be in the cluster subnet's virtual network,
//! and not at all when that network is the one AKS manages (`aks-vnet-<8 digits>` in the node resource
//! group), whose address space AKS owns.

/// The parts of a subnet's ARM ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetId {
    pub subscription: String,
    pub resource_group: String,
    pub virtual_network: String,
    pub subnet: String,
}

/// Why a subnet cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubnetIdError {
    #[error("{0:?} is not a subnet ID (/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>)")]
    Malformed(String),
    #[error("subnet {subnet} is not in the cluster's virtual network {cluster_vnet}")]
    OtherVirtualNetwork { subnet: String, cluster_vnet: String },
    #[error("subnet {0} cannot be used: the cluster's virtual network is managed by AKS, so nodes can only use the cluster subnet")]
    ManagedVirtualNetwork(String),
}

impl SubnetIdError {
    /// Static category: the SubnetsReady reason (upstream's).
    pub fn category(&self) -> &'static str {
        "SubnetIDInvalid"
    }
}

impl SubnetId {
    /// Parses an ID; segment names are case-insensitive, as in ARM.
    pub fn parse(id: &str) -> Result<SubnetId, SubnetIdError> {
        let segments: Vec<&str> = id.split('/').collect();
        let is = |s: &str, expected: &str| s.eq_ignore_ascii_case(expected);
        match segments.as_slice() {
            ["", subs, sub, rgs, rg, providers, ns, vnets, vnet, subnets, subnet]
                if is(subs, "subscriptions")
                    && is(rgs, "resourceGroups")
                    && is(providers, "providers")
                    && is(ns, "Microsoft.Network")
                    && is(vnets, "virtualNetworks")
                    && is(subnets, "subnets")
                    && [sub, rg, vnet, subnet].iter().all(|s| !s.is_empty()) =>
            {
                Ok(SubnetId {
                    subscription: sub.to_string(),
                    resource_group: rg.to_string(),
                    virtual_network: vnet.to_string(),
                    subnet: subnet.to_string(),
                })
            }
            _ => Err(SubnetIdError::Malformed(id.to_string())),
        }
    }

    /// The ID of the virtual network the subnet is in.
    pub fn vnet_id(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/{}",
            self.subscription, self.resource_group, self.virtual_network
        )
    }

    /// Same subscription, resource group and virtual network (ARM names are case-insensitive).
    pub fn same_vnet(&self, other: &SubnetId) -> bool {
        self.vnet_id().eq_ignore_ascii_case(&other.vnet_id())
    }

    /// Whether this is the subnet of a virtual network AKS created for the cluster (upstream
    /// `IsAKSManagedVNET`): `aks-vnet-<8 digits>` in the node resource group.
    pub fn is_aks_managed(&self, node_resource_group: &str) -> bool {
        let digits = self.virtual_network.strip_prefix("aks-vnet-");
        self.resource_group.eq_ignore_ascii_case(node_resource_group)
            && digits.is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// The subnet a class's nodes go in: its own `vnetSubnetID`, checked against the cluster subnet
/// (`VNET_SUBNET_ID`), or the cluster subnet.
pub fn class_subnet(
    class_subnet_id: Option<&str>,
    cluster_subnet_id: &str,
    node_resource_group: &str,
) -> Result<SubnetId, SubnetIdError> {
    let cluster = SubnetId::parse(cluster_subnet_id)?;
    let Some(id) = class_subnet_id.filter(|id| !id.eq_ignore_ascii_case(cluster_subnet_id)) else {
        return Ok(cluster);
    };
    let own = SubnetId::parse(id)?;
    if cluster.is_aks_managed(node_resource_group) {
        return Err(SubnetIdError::ManagedVirtualNetwork(id.to_string()));
    }
    if !own.same_vnet(&cluster) {
        return Err(SubnetIdError::OtherVirtualNetwork {
            subnet: id.to_string(),
            cluster_vnet: cluster.vnet_id(),
        });
    }
    Ok(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str =
        "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";

    #[test]
    fn parses_subnet_ids_case_insensitively() {
        let id = SubnetId::parse(
            "/Subscriptions/sub/resourcegroups/rg/providers/microsoft.network/virtualnetworks/vnet/subnets/a",
        )
        .unwrap();
        assert_eq!(
            (
                id.subscription.as_str(),
                id.resource_group.as_str(),
                id.virtual_network.as_str(),
                id.subnet.as_str()
            ),
            ("sub", "rg", "vnet", "a")
        );
        for bad in [
            "",
            "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet",
            "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/",
            "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualNetworks/vnet/subnets/a",
            "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/a/x",
        ] {
            assert_eq!(SubnetId::parse(bad), Err(SubnetIdError::Malformed(bad.to_string())), "{bad:?}");
        }
    }

    #[test]
    fn a_class_without_its_own_subnet_uses_the_cluster_subnet() {
        assert_eq!(class_subnet(None, CLUSTER, "mc_rg").unwrap().subnet, "nodes");
        assert_eq!(class_subnet(Some(CLUSTER), CLUSTER, "mc_rg").unwrap().subnet, "nodes");
    }

    #[test]
    fn a_class_subnet_must_share_the_cluster_vnet() {
        let same = CLUSTER.replace("/subnets/nodes", "/subnets/batch");
        assert_eq!(class_subnet(Some(&same), CLUSTER, "mc_rg").unwrap().subnet, "batch");
        let other = CLUSTER.replace("/virtualNetworks/vnet/", "/virtualNetworks/other/");
        let err = class_subnet(Some(&other), CLUSTER, "mc_rg").unwrap_err();
        assert!(matches!(err, SubnetIdError::OtherVirtualNetwork { .. }), "{err}");
        assert!(err.to_string().contains(&other), "{err}");
        assert_eq!(err.category(), "SubnetIDInvalid");
        let malformed = class_subnet(Some("/subscriptions/sub/nope"), CLUSTER, "mc_rg").unwrap_err();
        assert_eq!(malformed, SubnetIdError::Malformed("/subscriptions/sub/nope".into()));
    }

    #[test]
    fn no_custom_subnet_in_an_aks_managed_vnet() {
        let managed = "/subscriptions/sub/resourceGroups/MC_rg_c_eastus/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet";
        let custom = managed.replace("/subnets/aks-subnet", "/subnets/mine");
        let err = class_subnet(Some(&custom), managed, "mc_rg_c_eastus").unwrap_err();
        assert_eq!(err, SubnetIdError::ManagedVirtualNetwork(custom.clone()));
        assert!(class_subnet(None, managed, "mc_rg_c_eastus").is_ok());
        // The same name outside the node resource group is the user's own network.
        assert!(class_subnet(Some(&custom), managed, "other_rg").is_ok());
        assert!(!SubnetId::parse(&managed.replace("aks-vnet-12345678", "aks-vnet-1234"))
            .unwrap()
            .is_aks_managed("MC_rg_c_eastus"));
    }
}
