//! What a node's NIC joins besides its subnet (upstream `pkg/providers/instance/instance.go`, `pkg/providers/loadbalancer`): the backend pools of the
//! cluster's load balancers, which give the node outbound connectivity on a `loadBalancer` outbound
//! cluster and put it behind Services of type LoadBalancer, and the cluster's network security group.
//!
//! The choice is pure ([`backend_pools`], [`cluster_nsg`], [`attach_nsg`]) and works on the ARM JSON of
//! the listed resources; [`Attachments`] lists them once and keeps the answer for [`CACHE_TTL`], as
//! upstream does, because every launch needs it and it rarely changes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;

use super::client::ArmClients;
use super::errors::ArmFailure;

/// Upstream caches the load balancers for 2 hours (loadbalancer provider).
pub const CACHE_TTL: Duration = Duration::from_secs(2 * 60 * 60);
/// The cloud provider's public and internal load balancers of an AKS cluster.
const CLUSTER_LOAD_BALANCERS: [&str; 2] = ["kubernetes", "kubernetes-internal"];

/// The IDs the NIC body references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkAttachments {
    pub backend_pools: Vec<String>,
    /// The cluster's NSG; the NIC carries it only where [`attach_nsg`] says so.
    pub nsg_id: Option<String>,
}

/// Backend pool IDs of the cluster's load balancers, sorted. IPv6 pools (a node's primary IP
/// configuration is IPv4) and IP-based pools (their members are addresses, not NIC configurations;
/// ARM refuses a NIC joining one) are skipped.
pub fn backend_pools(load_balancers: &[Value]) -> Vec<String> {
    let mut pools: Vec<String> = load_balancers
        .iter()
        .filter(|lb| {
            let name = lb["name"].as_str().unwrap_or_default();
            CLUSTER_LOAD_BALANCERS.iter().any(|n| n.eq_ignore_ascii_case(name))
        })
        .flat_map(|lb| lb["properties"]["backendAddressPools"].as_array().cloned().unwrap_or_default())
        .filter(|pool| {
            let name = pool["name"].as_str().unwrap_or_default().to_ascii_lowercase();
            let ip_based = pool["properties"]["loadBalancerBackendAddresses"]
                .as_array()
                .is_some_and(|members| members.iter().any(|m| m["properties"]["ipAddress"].is_string()));
            !name.ends_with("-ipv6") && !ip_based
        })
        .filter_map(|pool| pool["id"].as_str().map(str::to_string))
        .collect();
    pools.sort();
    pools.dedup();
    pools
}

/// The NSG AKS creates for its node pools, `aks-agentpool-<8 digits>-nsg`.
pub fn cluster_nsg(security_groups: &[Value]) -> Option<String> {
    let mut matching: Vec<&str> = security_groups
        .iter()
        .filter(|nsg| is_agentpool_nsg_name(nsg["name"].as_str().unwrap_or_default()))
        .filter_map(|nsg| nsg["id"].as_str())
        .collect();
    matching.sort();
    matching.first().map(|id| id.to_string())
}

fn is_agentpool_nsg_name(name: &str) -> bool {
    let digits = name.strip_prefix("aks-agentpool-").and_then(|rest| rest.strip_suffix("-nsg"));
    digits.is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether the NIC itself carries the NSG. On the VNet AKS manages (`aks-vnet-<8 digits>/aks-subnet`)
/// the NSG is already on the subnet; on a bring-your-own subnet the NIC needs it.
pub fn attach_nsg(subnet_id: &str) -> bool {
    let lower = subnet_id.to_ascii_lowercase();
    let segments: Vec<&str> = lower.split('/').collect();
    let after =
        |key: &str| segments.iter().position(|s| *s == key).and_then(|i| segments.get(i + 1)).copied();
    let managed_vnet = after("virtualnetworks").is_some_and(|vnet| {
        vnet.strip_prefix("aks-vnet-").is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
    });
    !(managed_vnet && after("subnets") == Some("aks-subnet"))
}

/// The attachments of the node resource group, listed at most once per [`CACHE_TTL`].
#[derive(Default)]
pub struct Attachments {
    cached: Mutex<Option<(Instant, NetworkAttachments)>>,
}

impl Attachments {
    pub async fn get(&self, clients: &ArmClients, rg: &str) -> Result<NetworkAttachments, ArmFailure> {
        if let Some((at, attachments)) = self.lock().as_ref() {
            if at.elapsed() < CACHE_TTL {
                return Ok(attachments.clone());
            }
        }
        let load_balancers = list_json(clients, rg, Kind::LoadBalancers).await?;
        let nsg_id = cluster_nsg(&list_json(clients, rg, Kind::SecurityGroups).await?);
        let attachments = NetworkAttachments { backend_pools: backend_pools(&load_balancers), nsg_id };
        *self.lock() = Some((Instant::now(), attachments.clone()));
        Ok(attachments)
    }

    /// Forgets the cached answer, e.g. after ARM refused a pool that no longer exists.
    pub fn invalidate(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, NetworkAttachments)>> {
        self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

enum Kind {
    LoadBalancers,
    SecurityGroups,
}

/// Every resource of `kind` in the resource group, as ARM JSON.
async fn list_json(clients: &ArmClients, rg: &str, kind: Kind) -> Result<Vec<Value>, ArmFailure> {
    let sub = &clients.subscription_id;
    let to_json = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| ArmFailure { status: 0, code: "InvalidBody".into(), message: e.to_string() })
    };
    let mut items = Vec::new();
    match kind {
        Kind::LoadBalancers => {
            let mut pages = clients.network.load_balancers_client().list(rg, sub).into_stream();
            while let Some(page) = pages.next().await {
                for lb in page.map_err(|e| ArmFailure::from_sdk(&e))?.value {
                    items.push(to_json(serde_json::to_value(lb))?);
                }
            }
        }
        Kind::SecurityGroups => {
            let mut pages = clients.network.network_security_groups_client().list(rg, sub).into_stream();
            while let Some(page) = pages.next().await {
                for nsg in page.map_err(|e| ArmFailure::from_sdk(&e))?.value {
                    items.push(to_json(serde_json::to_value(nsg))?);
                }
            }
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(lb: &str, name: &str) -> Value {
        json!({"name": name, "id": format!("/lbs/{lb}/backendAddressPools/{name}"), "properties": {}})
    }

    #[test]
    fn pools_come_from_the_cluster_load_balancers_without_ipv6_or_ip_based_ones() {
        let ip_based = json!({"name": "byip", "id": "/lbs/kubernetes/backendAddressPools/byip",
            "properties": {"loadBalancerBackendAddresses": [{"properties": {"ipAddress": "10.0.0.4"}}]}});
        let lbs = vec![
            json!({"name": "kubernetes", "properties": {"backendAddressPools": [
                pool("kubernetes", "kubernetes"), pool("kubernetes", "aksOutboundBackendPool"),
                pool("kubernetes", "kubernetes-ipv6"), ip_based]}}),
            json!({"name": "kubernetes-internal", "properties": {"backendAddressPools": [
                pool("kubernetes-internal", "kubernetes")]}}),
            json!({"name": "someone-elses", "properties": {"backendAddressPools": [pool("x", "y")]}}),
        ];
        assert_eq!(
            backend_pools(&lbs),
            vec![
                "/lbs/kubernetes-internal/backendAddressPools/kubernetes",
                "/lbs/kubernetes/backendAddressPools/aksOutboundBackendPool",
                "/lbs/kubernetes/backendAddressPools/kubernetes",
            ]
        );
        assert!(backend_pools(&[]).is_empty());
    }

    #[test]
    fn the_agentpool_nsg_is_found_by_its_aks_name() {
        let nsgs = vec![
            json!({"name": "my-nsg", "id": "/nsg/my-nsg"}),
            json!({"name": "aks-agentpool-1234567-nsg", "id": "/nsg/short"}),
            json!({"name": "aks-agentpool-12345678-nsg", "id": "/nsg/aks"}),
        ];
        assert_eq!(cluster_nsg(&nsgs).as_deref(), Some("/nsg/aks"));
        assert_eq!(cluster_nsg(&nsgs[..2]), None);
    }

    #[test]
    fn only_a_bring_your_own_subnet_gets_the_nsg_on_the_nic() {
        let managed = "/subscriptions/s/resourceGroups/MC_rg/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet";
        let own = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes";
        let lookalike = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/pods";
        assert!(!attach_nsg(managed));
        assert!(attach_nsg(own));
        assert!(attach_nsg(lookalike));
    }
}
