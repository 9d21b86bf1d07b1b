//! The node VM: its ARM body, submit-and-poll create, force delete, and reading it back as an
//! [`Instance`].
//!
//! Owns the VM shape of upstream's `pkg/providers/instance/instance.go` (including `securityProfile`:
//! encryption at host, trusted launch) and the tag rules (upstream launchtemplate/tags.go).
//! azure_mgmt_compute 0.21's `create_or_update(..).await` does not wait for the operation (it never finds
//! the camelCase provisioning state), so creates are sent once and the `Azure-AsyncOperation` URL is
//! polled here, as often as ARM advises within the configured interval, until a deadline (`lro`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use azure_core::headers::HeaderName;
use azure_mgmt_compute::package_2024_07_01 as compute;
use serde_json::{json, Value};

use super::client::ArmClients;
use super::errors::ArmFailure;
use super::{lro, naming, LaunchSettings};
use crate::catalog::NodeSecurity;
use crate::cloud::{EphemeralOsDisk, InPlace, Instance};
use crate::model::CapacityType;

/// Tag keys (upstream launchtemplate/tags.go; Azure tag keys may not contain '/').
pub const TAG_CLUSTER: &str = "karpenter.azure.com_cluster";
pub const TAG_NODEPOOL: &str = "karpenter.sh_nodepool";
/// Tells AKS billing this VM is a Linux node (upstream default tag).
pub const TAG_BILLING: &str = "compute.aks.billing";

/// Tags of the VM and NIC: additional tags < node class tags < our defaults, '/' in keys → '_'.
pub fn tags(
    settings: &LaunchSettings,
    node_class_tags: &BTreeMap<String, String>,
    nodepool: &str,
) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = settings
        .additional_tags
        .iter()
        .chain(node_class_tags)
        .map(|(k, v)| (k.replace('/', "_"), v.clone()))
        .collect();
    tags.insert(TAG_CLUSTER.into(), settings.cluster_name.clone());
    tags.insert(TAG_BILLING.into(), "linux".into());
    if !nodepool.is_empty() {
        tags.insert(TAG_NODEPOOL.into(), nodepool.into());
    }
    tags
}

/// The chosen offering and per-VM inputs of a VM body.
#[derive(Debug, Clone)]
pub struct VmSpec<'a> {
    pub name: &'a str,
    pub size: &'a str,
    /// Logical zone ("1"), None when regional.
    pub zone: Option<&'a str>,
    pub capacity_type: CapacityType,
    pub image_id: &'a str,
    pub os_disk_size_gb: u32,
    pub ephemeral_os_disk: Option<EphemeralOsDisk>,
    pub nic_id: &'a str,
    pub tags: &'a BTreeMap<String, String>,
    pub custom_data: &'a str,
    pub security: NodeSecurity,
}

/// The VM PUT body.
pub fn vm_body(settings: &LaunchSettings, spec: &VmSpec<'_>) -> Value {
    let mut os_disk = json!({
        "name": spec.name,
        "createOption": "FromImage",
        "deleteOption": "Delete",
        "diskSizeGB": spec.os_disk_size_gb,
    });
    // Ephemeral only when the requested size fits the local disk, as upstream decides.
    match spec.ephemeral_os_disk.filter(|e| e.max_size_gb >= u64::from(spec.os_disk_size_gb)) {
        Some(ephemeral) => {
            os_disk["caching"] = json!("ReadOnly");
            os_disk["diffDiskSettings"] =
                json!({ "option": "Local", "placement": ephemeral.placement.as_str() });
        }
        None => os_disk["caching"] = json!("ReadWrite"),
    }
    // Customer-managed keys: the OS disk is encrypted with the given disk encryption set, ephemeral or
    // not, as upstream's setVMPropertiesOSDiskEncryption (pkg/providers/instance/vminstance.go) does.
    if let Some(des) = &settings.os_disk_encryption_set_id {
        os_disk["managedDisk"] = json!({ "diskEncryptionSet": { "id": des } });
    }
    let mut body = json!({
        "location": settings.location,
        "zones": spec.zone.map(|z| vec![z]).unwrap_or_default(),
        "tags": spec.tags,
        "properties": {
            "hardwareProfile": { "vmSize": spec.size },
            "storageProfile": {
                "imageReference": image_reference(spec.image_id),
                "osDisk": os_disk
            },
            "osProfile": {
                "computerName": spec.name,
                "adminUsername": settings.admin_username,
                "customData": spec.custom_data,
                "linuxConfiguration": {
                    "disablePasswordAuthentication": true,
                    "ssh": { "publicKeys": [{
                        "path": format!("/home/{}/.ssh/authorized_keys", settings.admin_username),
                        "keyData": settings.ssh_public_key
                    }] }
                }
            },
            "networkProfile": { "networkInterfaces": [{
                "id": spec.nic_id,
                "properties": { "primary": true, "deleteOption": "Delete" }
            }] },
            "priority": match spec.capacity_type { CapacityType::Spot => "Spot", CapacityType::OnDemand => "Regular" }
        }
    });
    if spec.capacity_type == CapacityType::Spot {
        // Delete on eviction so nothing lingers deallocated; -1 = pay up to the on-demand price.
        body["properties"]["evictionPolicy"] = json!("Delete");
        body["properties"]["billingProfile"] = json!({ "maxPrice": -1 });
    }
    if let Some(profile) = security_profile(&spec.security) {
        body["properties"]["securityProfile"] = profile;
    }
    if !settings.node_identities.is_empty() {
        let identities: serde_json::Map<String, Value> =
            settings.node_identities.iter().map(|id| (id.clone(), json!({}))).collect();
        body["identity"] = json!({ "type": "UserAssigned", "userAssignedIdentities": identities });
    }
    body
}

/// `securityProfile`, None when the class asks for nothing (Azure's defaults: no host encryption,
/// security type Standard). As upstream `setVMPropertiesSecurityProfile`: `encryptionAtHost` when asked,
/// and for trusted launch `securityType: TrustedLaunch` with both UEFI settings spelled out.
fn security_profile(security: &NodeSecurity) -> Option<Value> {
    if *security == NodeSecurity::default() {
        return None;
    }
    let mut profile = json!({});
    if security.encryption_at_host {
        profile["encryptionAtHost"] = json!(true);
    }
    if let Some(uefi) = security.trusted_launch {
        profile["securityType"] = json!("TrustedLaunch");
        profile["uefiSettings"] = json!({ "secureBootEnabled": uefi.secure_boot, "vTpmEnabled": uefi.vtpm });
    }
    Some(profile)
}

/// Community-gallery IDs go in their own field; SIG and managed image IDs in `id`.
fn image_reference(image_id: &str) -> Value {
    if image_id.starts_with("/CommunityGalleries/") {
        json!({ "communityGalleryImageId": image_id })
    } else {
        json!({ "id": image_id })
    }
}

fn sdk_failure(err: &azure_core::Error) -> ArmFailure {
    ArmFailure::from_sdk(err)
}

/// The VM document, or None when it does not exist.
pub async fn get_vm(clients: &ArmClients, rg: &str, name: &str) -> Result<Option<Value>, ArmFailure> {
    match clients.compute.virtual_machines_client().get(rg, name, &clients.subscription_id).await {
        Ok(vm) => Ok(Some(serde_json::to_value(vm).unwrap_or(Value::Null))),
        Err(err) => {
            let failure = sdk_failure(&err);
            if failure.is_not_found() {
                Ok(None)
            } else {
                Err(failure)
            }
        }
    }
}

/// Sends the create once; returns the operation-status URL when ARM gave one.
/// An accepted create: where its status is read, and when ARM advised reading it first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmittedCreate {
    /// The `Azure-AsyncOperation` URL, when ARM gave one.
    pub operation: Option<String>,
    /// ARM's `Retry-After` advice on the accepted PUT.
    pub retry_after: Option<Duration>,
}

pub async fn submit_create(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    body: Value,
) -> Result<SubmittedCreate, ArmFailure> {
    let vm: compute::models::VirtualMachine = serde_json::from_value(body).map_err(|e| ArmFailure {
        status: 0,
        code: "InvalidBody".into(),
        message: e.to_string(),
    })?;
    let response = clients
        .compute
        .virtual_machines_client()
        .create_or_update(rg, name, vm, &clients.subscription_id)
        .send()
        .await
        .map_err(|e| sdk_failure(&e))?;
    let headers = response.as_raw_response().headers();
    Ok(SubmittedCreate {
        operation: headers.get_optional_str(&azure_core::headers::AZURE_ASYNCOPERATION).map(str::to_string),
        retry_after: lro::retry_after(|name| headers.get_optional_str(&HeaderName::from(name.to_string()))),
    })
}

pub fn provisioning_state(vm: &Value) -> &str {
    vm.pointer("/properties/provisioningState").and_then(Value::as_str).unwrap_or_default()
}

/// Waits for a create to end: polls the operation status when there is one (it carries the failure's
/// code), otherwise the VM itself, at the cadence ARM advises (`lro`). Returns the final VM document.
pub async fn wait_for_create(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    submitted: &SubmittedCreate,
    polling: &lro::Polling<'_>,
) -> Result<Value, ArmFailure> {
    let poll_interval = polling.interval;
    let give_up = Instant::now() + polling.deadline();
    let mut advised = submitted.retry_after;
    loop {
        if let Some(url) = submitted.operation.as_deref() {
            // A failed poll (e.g. a throttled status GET) just costs one poll.
            if let Ok((status, advice)) = polling.call(clients.get_json_polled(url)).await {
                advised = advice.or(advised);
                match status.get("status").and_then(Value::as_str).unwrap_or_default() {
                    "Succeeded" => {
                        return polling.call(get_vm(clients, rg, name)).await?.ok_or_else(|| vanished(name))
                    }
                    "Failed" | "Canceled" => {
                        return Err(ArmFailure {
                            status: 409,
                            code: status
                                .pointer("/error/code")
                                .and_then(Value::as_str)
                                .unwrap_or("ProvisioningFailed")
                                .into(),
                            message: status
                                .pointer("/error/message")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .into(),
                        })
                    }
                    _ => {}
                }
            }
        } else {
            let vm = polling.call(get_vm(clients, rg, name)).await?.ok_or_else(|| vanished(name))?;
            match provisioning_state(&vm) {
                "Succeeded" => return Ok(vm),
                "Failed" | "Canceled" => {
                    return Err(ArmFailure {
                        status: 409,
                        code: "ProvisioningFailed".into(),
                        message: format!("VM {name} ended in provisioning state {}", provisioning_state(&vm)),
                    })
                }
                _ => {}
            }
        }
        let wait = lro::next_wait(advised, poll_interval);
        if Instant::now() + wait > give_up {
            return Err(ArmFailure {
                status: 0,
                code: "OperationTimedOut".into(),
                message: format!("creating VM {name} did not finish"),
            });
        }
        tokio::time::sleep(wait).await;
    }
}

fn vanished(name: &str) -> ArmFailure {
    ArmFailure {
        status: 404,
        code: "ResourceNotFound".into(),
        message: format!("VM {name} disappeared while being created"),
    }
}

/// Virtual Machines - Update with the VM's tags (replaced) and its user-assigned identities (added; ARM
/// keeps those a PATCH does not name), in place: neither ever recreates a node (upstream's in-place
/// update). NotFound is returned as such.
pub async fn update_in_place(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    desired: &InPlace,
) -> Result<(), ArmFailure> {
    let mut body = json!({ "tags": desired.tags });
    if !desired.identities.is_empty() {
        let identities: serde_json::Map<String, Value> =
            desired.identities.iter().map(|id| (id.clone(), json!({}))).collect();
        body["identity"] = json!({ "type": "UserAssigned", "userAssignedIdentities": identities });
    }
    let path = naming::vm_id(&clients.subscription_id, rg, name);
    clients.patch_json(&path, COMPUTE_API_VERSION, &body).await.map(|_| ())
}

/// The Compute API version of the SDK package the provider uses.
const COMPUTE_API_VERSION: &str = "2024-07-01";

/// Force-deletes the VM and waits until a GET says 404. Missing is success.
pub async fn delete_vm(
    clients: &ArmClients,
    rg: &str,
    name: &str,
    polling: &lro::Polling<'_>,
) -> Result<(), ArmFailure> {
    let vms = clients.compute.virtual_machines_client();
    let delete = vms.delete(rg, name, &clients.subscription_id).force_deletion(true).send();
    if let Err(err) = polling.call(delete).await {
        let failure = sdk_failure(&err);
        if !failure.is_not_found() {
            return Err(failure);
        }
    }
    for _ in 0..polling.max_polls.max(1) {
        if polling.call(get_vm(clients, rg, name)).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(polling.interval).await;
    }
    Err(ArmFailure {
        status: 0,
        code: "OperationTimedOut".into(),
        message: format!("deleting VM {name} did not finish"),
    })
}

/// The VMs in the resource group tagged with `key=value`, each read by `read` from its document as
/// it is parsed ([`ArmClients::list_each`]): a listing holds one page's text and what `read` keeps,
/// not a document, nor the SDK's model, of every VM (the SDK's models of 2,000 VMs took 17 MB).
pub async fn list_tagged<T: Send>(
    clients: &ArmClients,
    rg: &str,
    key: &str,
    value: &str,
    read: impl Fn(&Value) -> T + Sync,
) -> Result<Vec<T>, ArmFailure> {
    let path = naming::vm_collection(&clients.subscription_id, rg);
    let mut found = Vec::new();
    clients
        .list_each(&path, COMPUTE_API_VERSION, &mut |vm| {
            if vm.get("tags").and_then(|t| t.get(key)).and_then(Value::as_str) == Some(value) {
                found.push(read(&vm));
            }
        })
        .await?;
    Ok(found)
}

/// A VM document as an [`Instance`].
pub fn instance(vm: &Value, subscription: &str, rg: &str, location: &str) -> Instance {
    let text = |pointer: &str| vm.pointer(pointer).and_then(Value::as_str).map(str::to_string);
    let name = text("/name").unwrap_or_default();
    let tags: BTreeMap<String, String> = vm
        .get("tags")
        .and_then(Value::as_object)
        .map(|t| t.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    let zone = vm.pointer("/zones/0").and_then(Value::as_str).map(|z| format!("{location}-{z}"));
    let spot = text("/properties/priority").is_some_and(|p| p.eq_ignore_ascii_case("Spot"));
    Instance {
        provider_id: naming::provider_id(subscription, rg, &name),
        name,
        instance_type: text("/properties/hardwareProfile/vmSize").unwrap_or_default(),
        zone,
        capacity_type: if spot { CapacityType::Spot } else { CapacityType::OnDemand },
        nodepool: tags.get(TAG_NODEPOOL).cloned(),
        image_id: text("/properties/storageProfile/imageReference/communityGalleryImageId")
            .or_else(|| text("/properties/storageProfile/imageReference/id")),
        state: provisioning_state(vm).to_string(),
        created: text("/properties/timeCreated"),
        tags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::UefiSettings;

    #[test]
    fn security_profile_follows_the_class() {
        assert_eq!(security_profile(&NodeSecurity::default()), None);
        let eah = NodeSecurity { encryption_at_host: true, trusted_launch: None };
        assert_eq!(security_profile(&eah), Some(json!({ "encryptionAtHost": true })));
        let tl = NodeSecurity {
            encryption_at_host: false,
            trusted_launch: Some(UefiSettings { secure_boot: false, vtpm: true }),
        };
        assert_eq!(
            security_profile(&tl),
            Some(json!({
                "securityType": "TrustedLaunch",
                "uefiSettings": { "secureBootEnabled": false, "vTpmEnabled": true }
            }))
        );
    }

    #[test]
    fn the_sdk_model_keeps_the_security_profile() {
        // Creates go through azure_mgmt_compute's model; a field it does not know would be dropped silently.
        let security = NodeSecurity {
            encryption_at_host: true,
            trusted_launch: Some(UefiSettings { secure_boot: true, vtpm: true }),
        };
        let body = json!({ "location": "eastus", "properties": {
            "securityProfile": security_profile(&security).unwrap()
        }});
        let model: compute::models::VirtualMachine = serde_json::from_value(body.clone()).unwrap();
        let sent = serde_json::to_value(model).unwrap();
        assert_eq!(sent.pointer("/properties/securityProfile"), body.pointer("/properties/securityProfile"));
    }

    #[test]
    fn the_sdk_model_keeps_the_os_disk_encryption_set() {
        let des = "/subscriptions/s/resourceGroups/keys/providers/Microsoft.Compute/diskEncryptionSets/d";
        let body = json!({ "location": "eastus", "properties": { "storageProfile": { "osDisk": {
            "createOption": "FromImage", "managedDisk": { "diskEncryptionSet": { "id": des } }
        }}}});
        let model: compute::models::VirtualMachine = serde_json::from_value(body).unwrap();
        let sent = serde_json::to_value(model).unwrap();
        let path = "/properties/storageProfile/osDisk/managedDisk/diskEncryptionSet/id";
        assert_eq!(sent.pointer(path), Some(&json!(des)));
    }
}
