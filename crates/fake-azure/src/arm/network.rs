//! `Microsoft.Network/networkInterfaces`: create or update, get, list by resource group and delete.
//!
//! NICs provision at once (as on Azure, where a NIC PUT finishes in a second or two): a new NIC answers 201
//! with `provisioningState: Succeeded`, a private IP from 10.224.0.0/16 per IP configuration, and an
//! `Azure-AsyncOperation` URL whose operation has already succeeded. azure_mgmt_network 0.21 polls that URL
//! and then GETs the NIC. Deleting a NIC still attached to a VM is refused with 400 `NicInUse`; a VM delete
//! takes its NICs along when they were referenced with `deleteOption: Delete`. A NIC whose IP
//! configuration references a subnet that does not exist is refused (see `subnets`).

use serde_json::{json, Value};
use tokio::time::Instant;

use super::state::{NicRecord, Operation, Shared, State};
use super::subnets;
use super::wire::{self, ArmError, ArmRequest, ArmResponse, LroUrls, NETWORK_API_VERSIONS};

pub const NIC_TYPE: &str = "Microsoft.Network/networkInterfaces";

pub fn get_nic(shared: &Shared, rg: &str, name: &str) -> ArmResponse {
    let state = shared.lock();
    match state.nics.get(&(wire::key(rg), wire::key(name))) {
        Some(nic) => ArmResponse::json(200, nic.document.clone()),
        None => ArmError::resource_not_found(NIC_TYPE, name, rg).into_response(),
    }
}

/// `PATCH` of a NIC (Network Interfaces - Update Tags): the tags are replaced.
pub fn patch_nic_tags(shared: &Shared, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    let body = match request.json_body() {
        Ok(body) => body,
        Err(response) => return response,
    };
    let mut state = shared.lock();
    match state.nics.get_mut(&(wire::key(rg), wire::key(name))) {
        Some(nic) => {
            nic.document["tags"] = body["tags"].clone();
            ArmResponse::json(200, nic.document.clone())
        }
        None => ArmError::resource_not_found(NIC_TYPE, name, rg).into_response(),
    }
}

pub fn list_nics(shared: &Shared, request: &ArmRequest, rg: &str) -> ArmResponse {
    let state = shared.lock();
    let rg_key = wire::key(rg);
    let items =
        state.nics.iter().filter(|((r, _), _)| *r == rg_key).map(|(_, nic)| nic.document.clone()).collect();
    wire::list_page(request, &shared.base_url, items, shared.config.list_page_size)
}

pub fn put_nic(shared: &Shared, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    let body = match request.json_body() {
        Ok(body) => body,
        Err(response) => return response,
    };
    let location = body.get("location").and_then(Value::as_str).unwrap_or_default();
    if location.is_empty() {
        return ArmResponse::error(
            400,
            "LocationRequired",
            "The location property is required for this definition.",
        );
    }
    if !location.eq_ignore_ascii_case(&shared.config.location) {
        return ArmResponse::error(
            400,
            "LocationNotAvailableForResourceType",
            &format!("The provided location '{location}' is not available for resource type '{NIC_TYPE}'."),
        );
    }
    if let Some(refused) = super::lb::refuse_unknown_pools(shared, rg, name, &body) {
        return refused;
    }
    let mut state = shared.lock();
    let nic_id = wire::resource_id(&shared.config.subscription_id, rg, NIC_TYPE, name);
    if let Err(err) = subnets::check_nic_subnets(shared, &state, &body, &nic_id) {
        return err.into_response();
    }
    let key = (wire::key(rg), wire::key(name));
    let op_id = wire::uuid_from(state.next_id(), 0x2e7);
    let lro = network_lro(shared, &op_id);
    let now = Instant::now();
    state
        .operations
        .insert(op_id, Operation { start_time: wire::now_rfc3339(), until: now, outcome: Ok(()), vm: None });
    let status = if let Some(existing) = state.nics.get_mut(&key) {
        update_nic(existing, body);
        200
    } else {
        let canonical_rg = shared.has_resource_group(rg).unwrap_or(rg).to_string();
        let document =
            new_nic_document(&mut state, body, &shared.config.subscription_id, &canonical_rg, name);
        state.nics.insert(
            key.clone(),
            NicRecord {
                name: name.to_string(),
                resource_group: canonical_rg,
                document,
                attached_vm: None,
                reserved_for: None,
            },
        );
        201
    };
    let document = state.nics[&key].document.clone();
    ArmResponse::json(status, document)
        .with_header("Azure-AsyncOperation", lro.async_operation)
        .with_retry_after(shared.config.lro_retry_after)
}

pub fn delete_nic(shared: &Shared, rg: &str, name: &str) -> ArmResponse {
    let mut state = shared.lock();
    let key = (wire::key(rg), wire::key(name));
    let Some(nic) = state.nics.get(&key) else {
        return ArmResponse::empty(204);
    };
    if let Some(vm_name) = &nic.attached_vm {
        let nic_id = nic.document.get("id").and_then(Value::as_str).unwrap_or_default();
        let vm_id = wire::resource_id(
            &shared.config.subscription_id,
            &nic.resource_group,
            "Microsoft.Compute/virtualMachines",
            vm_name,
        );
        return ArmResponse::error(
            400,
            "NicInUse",
            &format!(
                "Network Interface {nic_id} is used by existing resource {vm_id}. In order to delete the network \
                 interface, it must be dissociated from the resource. To learn more, see aka.ms/deletenic."
            ),
        );
    }
    if let Some((vm_id, until)) = &nic.reserved_for {
        let left = until.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            return ArmResponse::error(
                400,
                "NicReservedForAnotherVm",
                &format!(
                    "Nic(s) in request is reserved for another Virtual Machine for {} seconds. Please provide                      another nic(s) or retry after {} seconds. Reserved VM: {vm_id}",
                    shared.config.nic_reservation.as_secs(),
                    left.as_secs().max(1)
                ),
            );
        }
    }
    state.nics.remove(&key);
    let op_id = wire::uuid_from(state.next_id(), 0xd7);
    let lro = network_lro(shared, &op_id);
    state.operations.insert(
        op_id,
        Operation { start_time: wire::now_rfc3339(), until: Instant::now(), outcome: Ok(()), vm: None },
    );
    ArmResponse::empty(202).with_lro_headers(&lro, shared.config.lro_retry_after)
}

fn network_lro(shared: &Shared, op_id: &str) -> LroUrls {
    let api = NETWORK_API_VERSIONS.last().copied().unwrap_or("2024-03-01");
    LroUrls::new(
        &shared.base_url,
        &shared.config.subscription_id,
        "Microsoft.Network",
        &shared.config.location,
        op_id,
        api,
    )
}

/// The GET document of a new NIC: the PUT body with ARM's read-only fields filled in.
fn new_nic_document(state: &mut State, mut doc: Value, subscription: &str, rg: &str, name: &str) -> Value {
    let id = wire::resource_id(subscription, rg, NIC_TYPE, name);
    let counter = state.next_id();
    doc["id"] = json!(id);
    doc["name"] = json!(name);
    doc["type"] = json!(NIC_TYPE);
    doc["etag"] = json!(format!("W/\"{}\"", wire::uuid_from(counter, 0xe7a6)));
    if !doc.get("properties").is_some_and(Value::is_object) {
        doc["properties"] = json!({});
    }
    let props = &mut doc["properties"];
    props["provisioningState"] = json!("Succeeded");
    props["resourceGuid"] = json!(wire::uuid_from(counter, 0x9a1d));
    props["nicType"] = json!("Standard");
    for flag in ["enableAcceleratedNetworking", "enableIPForwarding"] {
        if props.get(flag).is_none() {
            props[flag] = json!(false);
        }
    }
    if let Some(configs) = props.get_mut("ipConfigurations").and_then(Value::as_array_mut) {
        for (index, config) in configs.iter_mut().enumerate() {
            let config_name = config.get("name").and_then(Value::as_str).unwrap_or("ipconfig1").to_string();
            config["id"] = json!(format!("{id}/ipConfigurations/{config_name}"));
            config["name"] = json!(config_name);
            config["type"] = json!("Microsoft.Network/networkInterfaces/ipConfigurations");
            if !config.get("properties").is_some_and(Value::is_object) {
                config["properties"] = json!({});
            }
            let ip = state.counter;
            state.counter += 1;
            let cp = &mut config["properties"];
            cp["provisioningState"] = json!("Succeeded");
            cp["privateIPAddress"] = json!(format!("10.224.{}.{}", (ip / 250) % 256, ip % 250 + 4));
            cp["privateIPAddressVersion"] = json!("IPv4");
            if cp.get("privateIPAllocationMethod").is_none() {
                cp["privateIPAllocationMethod"] = json!("Dynamic");
            }
            if cp.get("primary").is_none() {
                cp["primary"] = json!(index == 0);
            }
        }
    }
    doc
}

/// An update keeps ARM's read-only fields and the VM attachment, and takes the rest from the new body.
fn update_nic(existing: &mut NicRecord, body: Value) {
    if let Some(tags) = body.get("tags") {
        existing.document["tags"] = tags.clone();
    }
    let Some(new_props) = body.get("properties").and_then(Value::as_object) else { return };
    let read_only =
        ["provisioningState", "resourceGuid", "virtualMachine", "ipConfigurations", "nicType", "macAddress"];
    for (field, value) in new_props {
        if !read_only.contains(&field.as_str()) {
            existing.document["properties"][field] = value.clone();
        }
    }
}
