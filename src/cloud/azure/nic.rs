//! The network interface of a node VM: its ARM body, create-if-missing and delete-and-wait.
//!
//! Owns the NIC shape of upstream's `pkg/providers/instance/instance.go`: primary dynamic IP configuration in the cluster subnet with
//! the load balancers' backend pools, the NSG where needed (see `network`), Azure CNI secondary IP
//! configurations, accelerated networking when the size supports it, no IP forwarding, our tags.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::client::ArmClients;
use super::errors::ArmFailure;
use super::network::{attach_nsg, NetworkAttachments};
use super::LaunchSettings;
use super::{lro, naming};

/// Per-node inputs of the NIC body.
#[derive(Debug, Clone, Copy)]
pub struct NicSpec<'a> {
    /// The AKSNodeClass subnet, else the cluster's.
    pub subnet_id: &'a str,
    pub accelerated_networking: bool,
    pub max_pods: u32,
}

/// The NIC PUT body: the primary IP configuration in the cluster subnet and the load balancers' backend
/// pools, the NSG when the subnet needs it on the NIC, and under Azure CNI without overlay (pod IPs come
/// from the subnet) one secondary IP configuration per pod beyond the first, as AKS does.
pub fn nic_body(
    settings: &LaunchSettings,
    nic: &NicSpec<'_>,
    tags: &BTreeMap<String, String>,
    attachments: &NetworkAttachments,
) -> Value {
    let NicSpec { subnet_id, accelerated_networking, max_pods } = *nic;
    let pools: Vec<Value> = attachments.backend_pools.iter().map(|id| json!({ "id": id })).collect();
    let mut ip_configurations = vec![json!({
        "name": "ipconfig1",
        "properties": {
            "primary": true,
            "privateIPAllocationMethod": "Dynamic",
            "subnet": { "id": subnet_id },
            "loadBalancerBackendAddressPools": pools,
        }
    })];
    if settings.bootstrap.network_plugin == "azure" {
        ip_configurations.extend((2..=max_pods.max(1)).map(|i| {
            json!({
                "name": format!("ipconfig{i}"),
                "properties": {
                    "primary": false,
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": { "id": subnet_id },
                }
            })
        }));
    }
    let mut properties = json!({
        "enableAcceleratedNetworking": accelerated_networking,
        "enableIPForwarding": false,
        "ipConfigurations": ip_configurations,
    });
    if let Some(nsg) = attachments.nsg_id.as_ref().filter(|_| attach_nsg(subnet_id)) {
        properties["networkSecurityGroup"] = json!({ "id": nsg });
    }
    json!({ "location": settings.location, "tags": tags, "properties": properties })
}

/// The NIC's ARM ID, creating it when it does not exist (GET before PUT: a restarted create reuses it).
/// The bool is true when this call created it.
pub async fn ensure_nic(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    body: Value,
) -> Result<(String, bool), ArmFailure> {
    let nics = clients.network.network_interfaces_client();
    match nics.get(rg, name, &clients.subscription_id).await {
        Ok(existing) => return Ok((existing.resource.id.unwrap_or_default(), false)),
        Err(err) => {
            let failure = ArmFailure::from_sdk(&err);
            if !failure.is_not_found() {
                return Err(failure);
            }
        }
    }
    let body: azure_mgmt_network::models::NetworkInterface = serde_json::from_value(body)
        .map_err(|e| ArmFailure { status: 0, code: "InvalidBody".into(), message: e.to_string() })?;
    // The network SDK's LRO polls correctly, unlike the compute one.
    let created = nics
        .create_or_update(rg, name, body, &clients.subscription_id)
        .await
        .map_err(|e| ArmFailure::from_sdk(&e))?;
    Ok((created.resource.id.unwrap_or_default(), true))
}

/// Deletes the NIC and waits until it is gone. A NIC still attached to a VM that is being deleted is
/// refused (`NicInUse`), so that is retried until the VM has let go.
pub async fn delete_nic(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    polling: &lro::Polling<'_>,
) -> Result<(), ArmFailure> {
    let nics = clients.network.network_interfaces_client();
    let mut last = None;
    for _ in 0..polling.max_polls.max(1) {
        match polling.call(nics.delete(rg, name, &clients.subscription_id).send()).await {
            Ok(_) => {}
            Err(err) => {
                let failure = ArmFailure::from_sdk(&err);
                if failure.is_not_found() {
                    return Ok(());
                }
                if failure.code != "NicInUse" {
                    return Err(failure);
                }
                last = Some(failure);
                tokio::time::sleep(polling.interval).await;
                continue;
            }
        }
        match polling.call(async { nics.get(rg, name, &clients.subscription_id).await }).await {
            Err(err) if ArmFailure::from_sdk(&err).is_not_found() => return Ok(()),
            Err(err) => last = Some(ArmFailure::from_sdk(&err)),
            Ok(_) => {}
        }
        tokio::time::sleep(polling.interval).await;
    }
    Err(last.unwrap_or_else(|| timed_out(name)))
}

/// Replaces the NIC's tags (Network Interfaces - Update Tags); a NIC that is gone is success (a VM can
/// outlive the NIC it was created with only in a broken cluster, and GC handles that).
pub async fn update_tags(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    tags: &BTreeMap<String, String>,
) -> Result<(), ArmFailure> {
    let body = azure_mgmt_network::models::TagsObject { tags: Some(json!(tags)) };
    match clients
        .network
        .network_interfaces_client()
        .update_tags(rg, name, body, &clients.subscription_id)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let failure = ArmFailure::from_sdk(&e);
            if failure.is_not_found() {
                Ok(())
            } else {
                Err(failure)
            }
        }
    }
}

/// Names of the NICs in the resource group whose tags include `key=value`, each read from its page's
/// text as it is parsed ([`ArmClients::list_each`]), as the VM listing is.
pub async fn list_tagged(
    clients: &ArmClients,
    rg: &str,
    key: &str,
    value: &str,
) -> Result<Vec<String>, ArmFailure> {
    let path = naming::nic_collection(&clients.subscription_id, rg);
    let mut names = Vec::new();
    clients
        .list_each(&path, NETWORK_API_VERSION, &mut |nic| {
            let tagged = nic.get("tags").and_then(|t| t.get(key)).and_then(Value::as_str) == Some(value);
            if let (true, Some(name)) = (tagged, nic.get("name").and_then(Value::as_str)) {
                names.push(name.to_string());
            }
        })
        .await?;
    Ok(names)
}

/// The Network API version of the SDK package the provider uses (`azure_mgmt_network`'s default tag).
const NETWORK_API_VERSION: &str = "2024-03-01";

fn timed_out(name: &str) -> ArmFailure {
    ArmFailure {
        status: 0,
        code: "OperationTimedOut".into(),
        message: format!("deleting NIC {name} did not finish"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::azure::{BootstrapSettings, Secret};

    fn settings(network_plugin: &str) -> LaunchSettings {
        LaunchSettings {
            cluster_name: "c".into(),
            location: "eastus".into(),
            node_resource_group: "mc".into(),
            subnet_id: "/subnets/nodes".into(),
            ssh_public_key: "ssh-ed25519 AAAA".into(),
            admin_username: "azureuser".into(),
            node_identities: vec![],
            additional_tags: BTreeMap::new(),
            os_disk_encryption_set_id: None,
            bootstrap: BootstrapSettings {
                network_plugin: network_plugin.into(),
                ..BootstrapSettings::new("https://c:443", Secret::new("abcdef.0123456789abcdef"), "")
            },
            poll_interval: std::time::Duration::from_secs(1),
            max_polls: 1,
            max_concurrent_calls: 1,
        }
    }

    #[test]
    fn azure_cni_without_overlay_gets_one_ip_configuration_per_pod() {
        let attachments = NetworkAttachments {
            backend_pools: vec!["/pools/kubernetes".into()],
            nsg_id: Some("/nsg/aks-agentpool-12345678-nsg".into()),
        };
        let spec = NicSpec { subnet_id: "/subnets/nodes", accelerated_networking: true, max_pods: 30 };
        let body = nic_body(&settings("azure"), &spec, &BTreeMap::new(), &attachments);
        let configs = body["properties"]["ipConfigurations"].as_array().unwrap();
        assert_eq!(configs.len(), 30);
        assert_eq!(configs[0]["properties"]["primary"], true);
        assert_eq!(configs[0]["properties"]["loadBalancerBackendAddressPools"][0]["id"], "/pools/kubernetes");
        assert_eq!(configs[29]["name"], "ipconfig30");
        assert!(configs[1]["properties"]["loadBalancerBackendAddressPools"].is_null());
        assert_eq!(body["properties"]["networkSecurityGroup"]["id"], "/nsg/aks-agentpool-12345678-nsg");

        let spec = NicSpec { subnet_id: "/subnets/other", accelerated_networking: false, max_pods: 250 };
        let overlay = nic_body(&settings("none"), &spec, &BTreeMap::new(), &attachments);
        assert_eq!(
            overlay["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"],
            "/subnets/other"
        );
        let managed = "/subscriptions/s/resourceGroups/mc/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet";
        let spec = NicSpec { subnet_id: managed, accelerated_networking: false, max_pods: 250 };
        let on_managed_vnet = nic_body(&settings("none"), &spec, &BTreeMap::new(), &attachments);
        assert!(on_managed_vnet["properties"]["networkSecurityGroup"].is_null(), "the subnet has the NSG");
        assert_eq!(overlay["properties"]["ipConfigurations"].as_array().unwrap().len(), 1);
    }
}
