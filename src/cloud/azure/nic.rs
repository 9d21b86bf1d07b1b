//! The network interface of a node VM: its ARM body, create-if-missing and delete-and-wait.
//!
//! Owns the NIC shape of reference §3.1 step 6 (primary dynamic IP configuration in the cluster subnet,
//! accelerated networking when the size supports it, no IP forwarding, our tags). Load-balancer backend
//! pools, NSGs and Azure CNI secondary IP configurations are not set yet.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::client::ArmClients;
use super::errors::ArmFailure;
use super::LaunchSettings;

/// The NIC PUT body, in `subnet_id` (the class's subnet) or else the cluster subnet.
pub fn nic_body(
    settings: &LaunchSettings,
    subnet_id: Option<&str>,
    accelerated_networking: bool,
    tags: &BTreeMap<String, String>,
) -> Value {
    json!({
        "location": settings.location,
        "tags": tags,
        "properties": {
            "enableAcceleratedNetworking": accelerated_networking,
            "enableIPForwarding": false,
            "ipConfigurations": [{
                "name": "ipconfig1",
                "properties": {
                    "primary": true,
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": { "id": subnet_id.unwrap_or(&settings.subnet_id) }
                }
            }]
        }
    })
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
    poll_interval: Duration,
    max_polls: u32,
) -> Result<(), ArmFailure> {
    let nics = clients.network.network_interfaces_client();
    let mut last = None;
    for _ in 0..max_polls.max(1) {
        match nics.delete(rg, name, &clients.subscription_id).send().await {
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
                tokio::time::sleep(poll_interval).await;
                continue;
            }
        }
        match nics.get(rg, name, &clients.subscription_id).await {
            Err(err) if ArmFailure::from_sdk(&err).is_not_found() => return Ok(()),
            Err(err) => last = Some(ArmFailure::from_sdk(&err)),
            Ok(_) => {}
        }
        tokio::time::sleep(poll_interval).await;
    }
    Err(last.unwrap_or_else(|| timed_out(name)))
}

/// Names of the NICs in the resource group whose tags include `key=value`.
pub async fn list_tagged(
    clients: &ArmClients,
    rg: &str,
    key: &str,
    value: &str,
) -> Result<Vec<String>, ArmFailure> {
    let mut names = Vec::new();
    let mut pages =
        clients.network.network_interfaces_client().list(rg, &clients.subscription_id).into_stream();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| ArmFailure::from_sdk(&e))?;
        for nic in page.value {
            let tagged = nic.resource.tags.as_ref().is_some_and(|t| t[key] == value);
            if let (true, Some(name)) = (tagged, nic.resource.name) {
                names.push(name);
            }
        }
    }
    Ok(names)
}

fn timed_out(name: &str) -> ArmFailure {
    ArmFailure {
        status: 0,
        code: "OperationTimedOut".into(),
        message: format!("deleting NIC {name} did not finish"),
    }
}
