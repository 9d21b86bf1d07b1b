//! `Microsoft.Network/loadBalancers` and `networkSecurityGroups`, listed by resource group, shaped like
//! what AKS creates in a node resource group: the `kubernetes` load balancer with the `kubernetes`,
//! `aksOutboundBackendPool` and `kubernetes-ipv6` backend pools, and the `aks-agentpool-<8 digits>-nsg`
//! security group next to one of the user's. A NIC PUT that references a pool that does not exist is
//! refused as ARM does, so a launcher holding a stale pool list can be tested.

use serde_json::{json, Value};

use super::state::Shared;
use super::wire::{self, ArmRequest, ArmResponse};

pub const LB_TYPE: &str = "Microsoft.Network/loadBalancers";
pub const NSG_TYPE: &str = "Microsoft.Network/networkSecurityGroups";
/// The NSG AKS would have created.
pub const AKS_NSG: &str = "aks-agentpool-12345678-nsg";
const POOLS: [&str; 3] = ["kubernetes", "aksOutboundBackendPool", "kubernetes-ipv6"];

/// The backend pool IDs that exist now in `rg`.
pub fn pool_ids(shared: &Shared, rg: &str) -> Vec<String> {
    let removed = shared.lock().removed_pools.clone();
    let lb = resource_id(shared, rg, LB_TYPE, "kubernetes");
    POOLS.iter().filter(|p| !removed.contains(**p)).map(|p| format!("{lb}/backendAddressPools/{p}")).collect()
}

pub fn list_load_balancers(shared: &Shared, request: &ArmRequest, rg: &str) -> ArmResponse {
    let lb = resource_id(shared, rg, LB_TYPE, "kubernetes");
    let pools: Vec<Value> = pool_ids(shared, rg)
        .into_iter()
        .map(|id| {
            let name = id.rsplit('/').next().unwrap_or_default().to_string();
            json!({"name": name, "id": id, "properties": {"provisioningState": "Succeeded"}})
        })
        .collect();
    let items = vec![json!({
        "name": "kubernetes", "id": lb, "type": LB_TYPE, "location": shared.config.location,
        "sku": {"name": "Standard"},
        "properties": {"provisioningState": "Succeeded", "backendAddressPools": pools}
    })];
    wire::list_page(request, &shared.base_url, items, shared.config.list_page_size)
}

pub fn list_security_groups(shared: &Shared, request: &ArmRequest, rg: &str) -> ArmResponse {
    let items = ["custom-nsg", AKS_NSG]
        .iter()
        .map(|name| {
            json!({"name": name, "id": resource_id(shared, rg, NSG_TYPE, name), "type": NSG_TYPE,
                   "location": shared.config.location, "properties": {"provisioningState": "Succeeded"}})
        })
        .collect();
    wire::list_page(request, &shared.base_url, items, shared.config.list_page_size)
}

/// ARM's answer to a NIC that joins a backend pool that does not exist, if `body` does.
pub fn refuse_unknown_pools(shared: &Shared, rg: &str, nic: &str, body: &Value) -> Option<ArmResponse> {
    let known: Vec<String> = pool_ids(shared, rg).iter().map(|id| wire::key(id)).collect();
    let configs = body["properties"]["ipConfigurations"].as_array()?;
    let referenced = configs.iter().flat_map(|c| {
        c["properties"]["loadBalancerBackendAddressPools"].as_array().cloned().unwrap_or_default()
    });
    for pool in referenced {
        let id = pool["id"].as_str().unwrap_or_default();
        if !known.contains(&wire::key(id)) {
            let message = format!(
                "Resource {id} referenced by resource {} was not found. Please make sure that the referenced \
                 resource exists, and that both resources are in the same region.",
                resource_id(shared, rg, super::network::NIC_TYPE, nic)
            );
            return Some(ArmResponse::error(400, "InvalidResourceReference", &message));
        }
    }
    None
}

fn resource_id(shared: &Shared, rg: &str, resource_type: &str, name: &str) -> String {
    let rg = shared.has_resource_group(rg).unwrap_or(rg);
    wire::resource_id(&shared.config.subscription_id, rg, resource_type, name)
}
