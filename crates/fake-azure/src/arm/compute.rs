//! `Microsoft.Compute/virtualMachines`: create as a long-running operation, get, list by resource group,
//! (force) delete, and the operation-status URLs both LRO styles poll.
//!
//! Behaviour worth knowing when reading tests:
//! - A first PUT answers 201 with the VM in `Creating`, plus `Azure-AsyncOperation`, `Location` and
//!   `Retry-After`. A repeated PUT answers 200 with the current document (it does not restart a create),
//!   which is what azure_mgmt_compute 0.21's `create_or_update(..).await` relies on: it re-sends the PUT
//!   until `properties.provisioningState` is final. A PUT on a `Succeeded` VM replaces its tags only.
//! - A PUT while the VM is `Deleting` is refused with 409 `OperationNotAllowed`, as Azure does.
//! - DELETE of a missing VM is 204 (ARM delete is idempotent); GET of a missing VM is 404 `ResourceNotFound`.
//! - GET never returns `osProfile.customData` or `adminPassword`.
//! - A community-gallery image must be published and bootable by the size (see `gallery`), and the
//!   security profile must suit the size and image (see `security`).
//! - Operation-status URLs are served by `operations`.

use std::sync::Arc;
use std::time::Duration;

use karpenter_azure::catalog::embedded_sku;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::faults::{self, CreateAttempt, Delivery, Fault};
use super::state::{Operation, Shared, State, VmPhase, VmRecord};
use super::wire::{self, ArmError, ArmRequest, ArmResponse, LroUrls, COMPUTE_VM_API_VERSIONS};
use super::{boot, gallery, osdisk, security};

pub const VM_TYPE: &str = "Microsoft.Compute/virtualMachines";

/// The document a GET returns: the stored one with the provisioning state of the current phase.
pub fn render_vm(vm: &VmRecord, instance_view: bool) -> Value {
    let mut doc = vm.document.clone();
    doc["properties"]["provisioningState"] = json!(vm.phase.provisioning_state());
    if instance_view {
        let power = if vm.phase == VmPhase::Succeeded { "PowerState/running" } else { "PowerState/starting" };
        let provisioning =
            format!("ProvisioningState/{}", vm.phase.provisioning_state().to_ascii_lowercase());
        doc["properties"]["instanceView"] =
            json!({ "statuses": [{ "code": provisioning }, { "code": power }] });
    }
    doc
}

pub fn get_vm(shared: &Shared, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    let state = shared.lock();
    let expand = request.query_param("$expand").is_some_and(|e| e.eq_ignore_ascii_case("instanceView"));
    match state.vms.get(&(wire::key(rg), wire::key(name))) {
        Some(vm) => ArmResponse::json(200, render_vm(vm, expand)),
        None => ArmError::resource_not_found(VM_TYPE, name, rg).into_response(),
    }
}

/// `PATCH` of a VM (Virtual Machines - Update) with `tags` (replaced) and `identity` (user-assigned
/// identities added to those the VM has, as ARM merges them); nothing else may change here (in-place
/// updates of a node); the answer is the updated VM, at once.
pub fn patch_vm_tags(shared: &Shared, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    let body = match request.json_body() {
        Ok(body) => body,
        Err(response) => return response,
    };
    if body.as_object().is_some_and(|o| o.keys().any(|k| k != "tags" && k != "identity")) {
        return ArmError::new(
            400,
            "PropertyChangeNotAllowed",
            "the fake ARM's VM PATCH takes only tags and identity",
        )
        .into_response();
    }
    let mut state = shared.lock();
    match state.vms.get_mut(&(wire::key(rg), wire::key(name))) {
        Some(vm) => {
            if body.get("tags").is_some() {
                vm.document["tags"] = body["tags"].clone();
            }
            if let Some(added) = body.pointer("/identity/userAssignedIdentities").and_then(Value::as_object) {
                vm.document["identity"]["type"] = json!("UserAssigned");
                for (id, value) in added {
                    vm.document["identity"]["userAssignedIdentities"][id] = value.clone();
                }
            }
            ArmResponse::json(200, render_vm(vm, false))
        }
        None => ArmError::resource_not_found(VM_TYPE, name, rg).into_response(),
    }
}

pub fn list_vms(shared: &Shared, request: &ArmRequest, rg: &str) -> ArmResponse {
    let state = shared.lock();
    let rg_key = wire::key(rg);
    let items =
        state.vms.iter().filter(|((r, _), _)| *r == rg_key).map(|(_, vm)| render_vm(vm, false)).collect();
    wire::list_page(request, &shared.base_url, items, shared.config.list_page_size)
}

pub fn put_vm(shared: &Arc<Shared>, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    let mut state = shared.lock();
    *state.vm_puts.entry(wire::key(name)).or_default() += 1;
    let key = (wire::key(rg), wire::key(name));
    if let Some(existing) = state.vms.get_mut(&key) {
        return put_existing(existing, request);
    }
    let body = match request.json_body() {
        Ok(body) => body,
        Err(response) => return response,
    };
    let spec = match VmSpec::parse(&body, &shared.config.location) {
        Ok(spec) => spec,
        Err(err) => return err.into_response(),
    };
    let image = match gallery::check_vm_image(&state, &body, &spec.vm_size, &shared.config.location) {
        Ok(image) => image,
        Err(err) => return err.into_response(),
    };
    if let Err(err) = osdisk::check_os_disk(&body) {
        return err.into_response();
    }
    if let Some(sku) = embedded_sku(&spec.vm_size) {
        if let Err(err) = security::check_vm_security(&body, sku, image) {
            return err.into_response();
        }
    }
    let nics = match resolve_nics(&state, &body) {
        Ok(nics) => nics,
        Err(err) => return err.into_response(),
    };
    let attempt = CreateAttempt {
        location: &shared.config.location,
        sku: &spec.vm_size,
        family: &spec.family,
        vcpus: spec.vcpus,
        zone: spec.zone.as_deref(),
        spot: spec.spot,
    };
    let mut outcome = Ok(());
    let vm_arm_id = {
        let canonical_rg = shared.has_resource_group(rg).unwrap_or(rg);
        wire::resource_id(&shared.config.subscription_id, canonical_rg, VM_TYPE, name)
    };
    for (error, delivery) in quota_error(&state, &attempt)
        .into_iter()
        .chain(faults::take_capacity_fault(&mut state.faults, &attempt))
    {
        match delivery {
            Delivery::Sync => {
                reserve_nics(&mut state, &nics, &vm_arm_id, Instant::now() + shared.config.nic_reservation);
                return error.into_response();
            }
            Delivery::Async => outcome = outcome.and(Err(error)),
        }
    }
    let delay = faults::provisioning_delay_ms(&state.faults, &attempt)
        .map(Duration::from_millis)
        .unwrap_or(shared.config.provisioning_delay);
    let until = Instant::now() + delay;

    let id = state.next_id();
    let vm_id = wire::uuid_from(id, 0x7e57_c0de);
    let canonical_rg = shared.has_resource_group(rg).unwrap_or(rg).to_string();
    let (document, custom_data) =
        stored_document(body, &shared.config.subscription_id, &canonical_rg, name, &vm_id);
    let op_id = wire::uuid_from(state.next_id(), 0x0ba5e);
    let lro = compute_lro(shared, &op_id);
    state.operations.insert(
        op_id,
        Operation { start_time: wire::now_rfc3339(), until, outcome: outcome.clone(), vm: Some(key.clone()) },
    );
    let vm = VmRecord {
        name: name.to_string(),
        resource_group: canonical_rg,
        document,
        custom_data,
        phase: VmPhase::Creating { until, outcome: outcome.clone() },
        vm_id: vm_id.clone(),
        vm_size: spec.vm_size,
        family: spec.family,
        vcpus: spec.vcpus,
        zone: spec.zone,
        spot: spec.spot,
        nics,
    };
    attach_nics(&mut state, &vm);
    let response =
        ArmResponse::json(201, render_vm(&vm, false)).with_lro_headers(&lro, shared.config.lro_retry_after);
    state.vms.insert(key.clone(), vm);
    drop(state);
    if outcome.is_ok() {
        boot::schedule(shared.clone(), key, vm_id, until + shared.config.boot_delay);
    }
    response
}

/// A PUT on a VM that already exists: report where it is, or refuse while it is being deleted.
fn put_existing(existing: &mut VmRecord, request: &ArmRequest) -> ArmResponse {
    match existing.phase {
        VmPhase::Deleting { .. } => ArmResponse::error(
            409,
            "OperationNotAllowed",
            &format!(
                "Operation 'PUT' is not allowed on VM '{}' since the VM is marked for deletion. You can only retry \
                 the Delete operation (or wait for an ongoing one to complete).",
                existing.name
            ),
        ),
        VmPhase::Succeeded => {
            if let Some(tags) = request.json_body().ok().and_then(|b| b.get("tags").cloned()) {
                existing.document["tags"] = tags;
            }
            ArmResponse::json(200, render_vm(existing, false))
        }
        VmPhase::Creating { .. } | VmPhase::Failed(_) => ArmResponse::json(200, render_vm(existing, false)),
    }
}

pub fn delete_vm(shared: &Shared, request: &ArmRequest, rg: &str, name: &str) -> ArmResponse {
    if let Some(force) = request.query_param("forceDeletion") {
        if force != "true" && force != "false" {
            return ArmResponse::error(
                400,
                "InvalidParameter",
                &format!("The value '{force}' of parameter 'forceDeletion' is invalid."),
            );
        }
    }
    let mut state = shared.lock();
    let key = (wire::key(rg), wire::key(name));
    if !state.vms.contains_key(&key) {
        return ArmResponse::empty(204);
    }
    let until = Instant::now() + shared.config.deletion_delay;
    let op_id = wire::uuid_from(state.next_id(), 0xde1e7e);
    let lro = compute_lro(shared, &op_id);
    state
        .operations
        .insert(op_id, Operation { start_time: wire::now_rfc3339(), until, outcome: Ok(()), vm: None });
    if let Some(vm) = state.vms.get_mut(&key) {
        if !matches!(vm.phase, VmPhase::Deleting { .. }) {
            vm.phase = VmPhase::Deleting { until };
        }
    }
    ArmResponse::empty(202).with_lro_headers(&lro, shared.config.lro_retry_after)
}

fn compute_lro(shared: &Shared, op_id: &str) -> LroUrls {
    let api = COMPUTE_VM_API_VERSIONS.last().copied().unwrap_or("2024-07-01");
    let location = &shared.config.location;
    LroUrls::new(&shared.base_url, &shared.config.subscription_id, "Microsoft.Compute", location, op_id, api)
}

/// The fields of a VM PUT that the simulation needs, validated as Compute validates them.
struct VmSpec {
    vm_size: String,
    family: String,
    vcpus: u32,
    zone: Option<String>,
    spot: bool,
}

impl VmSpec {
    fn parse(body: &Value, region: &str) -> Result<VmSpec, ArmError> {
        let location = body.get("location").and_then(Value::as_str).unwrap_or_default();
        if !location.eq_ignore_ascii_case(region) {
            return Err(ArmError::new(
                400,
                "LocationNotAvailableForResourceType",
                &format!("The provided location '{location}' is not available for resource type '{VM_TYPE}'. List of available regions for the resource type is '{region}'."),
            ));
        }
        let Some(vm_size) = body.pointer("/properties/hardwareProfile/vmSize").and_then(Value::as_str) else {
            return Err(ArmError::new(
                400,
                "InvalidParameter",
                "Required parameter 'hardwareProfile.vmSize' is missing (null).",
            ));
        };
        let sku = embedded_sku(vm_size).filter(|sku| sku.prices.contains_key(region)).ok_or_else(|| {
            ArmError::new(
                400,
                "InvalidParameter",
                &format!("The requested VM size {vm_size} is not available in the current region. Find out more on the available VM sizes in each region at https://aka.ms/azure-regions."),
            )
        })?;
        let zones: Vec<String> = body
            .get("zones")
            .and_then(Value::as_array)
            .map(|zs| zs.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let spot = body
            .pointer("/properties/priority")
            .and_then(Value::as_str)
            .is_some_and(|p| p.eq_ignore_ascii_case("Spot"));
        Ok(VmSpec {
            vm_size: sku.name.clone(),
            family: sku.family.clone().unwrap_or_else(|| format!("standard{}Family", sku.series)),
            vcpus: sku.vcpus,
            zone: zones.into_iter().next(),
            spot,
        })
    }
}

/// The `OperationNotAllowed` quota error if a quota fault covers the attempt and it does not fit.
fn quota_error(state: &State, attempt: &CreateAttempt<'_>) -> Option<(ArmError, Delivery)> {
    state.faults.iter().find_map(|fault| {
        let Fault::Quota { scope, limit, delivery } = fault else { return None };
        if !scope.applies_to(attempt) {
            return None;
        }
        let usage: u32 = state
            .vms
            .values()
            .filter(|vm| {
                matches!(
                    vm.phase,
                    VmPhase::Creating { outcome: Ok(()), .. } | VmPhase::Succeeded | VmPhase::Deleting { .. }
                )
            })
            .filter(|vm| scope.counts(attempt, &vm.family, vm.spot))
            .map(|vm| vm.vcpus)
            .sum();
        (usage + attempt.vcpus > *limit).then(|| (scope.to_arm(attempt, *limit, usage), *delivery))
    })
}

/// The NICs a VM references, which must exist; with whether each is deleted along with the VM.
fn resolve_nics(state: &State, body: &Value) -> Result<Vec<(String, bool)>, ArmError> {
    let refs = body
        .pointer("/properties/networkProfile/networkInterfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut nics = Vec::new();
    for nic_ref in refs {
        let id = nic_ref.get("id").and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase();
        if !state.nics.values().any(|nic| super::state::nic_id_of(nic) == id) {
            return Err(ArmError::new(
                400,
                "InvalidResourceReference",
                &format!("Resource {id} referenced by the virtual machine was not found. Please make sure that the referenced resource exists, and that both resources are in the same region."),
            ));
        }
        let delete = nic_ref
            .pointer("/properties/deleteOption")
            .and_then(Value::as_str)
            .is_some_and(|d| d.eq_ignore_ascii_case("Delete"));
        nics.push((id, delete));
    }
    Ok(nics)
}

/// Holds the NICs of a failed create for the VM `vm_id` until `until`, as Network does (upstream
/// Azure/karpenter-provider-azure#92, `NicReservedForAnotherVm`).
fn reserve_nics(state: &mut State, nics: &[(String, bool)], vm_id: &str, until: Instant) {
    for (nic_id, _) in nics {
        if let Some(nic) = state.nics.values_mut().find(|nic| super::state::nic_id_of(nic) == *nic_id) {
            nic.reserved_for = Some((vm_id.to_string(), until));
        }
    }
}

/// Marks the VM's NICs as attached (`properties.virtualMachine.id`), as Network does.
fn attach_nics(state: &mut State, vm: &VmRecord) {
    let vm_id = vm.document.get("id").cloned().unwrap_or(Value::Null);
    for (nic_id, _) in &vm.nics {
        if let Some(nic) = state.nics.values_mut().find(|nic| super::state::nic_id_of(nic) == *nic_id) {
            nic.attached_vm = Some(vm.name.clone());
            nic.document["properties"]["virtualMachine"] = json!({ "id": vm_id });
        }
    }
}

/// The GET document for a new VM: the PUT body with ARM's read-only fields set and secrets removed.
fn stored_document(
    mut doc: Value,
    subscription: &str,
    rg: &str,
    name: &str,
    vm_id: &str,
) -> (Value, Option<String>) {
    doc["id"] = json!(wire::resource_id(subscription, rg, VM_TYPE, name));
    doc["name"] = json!(name);
    doc["type"] = json!(VM_TYPE);
    if !doc.get("properties").is_some_and(Value::is_object) {
        doc["properties"] = json!({});
    }
    osdisk::fill_in_managed_disk(&mut doc, subscription, rg);
    let props = &mut doc["properties"];
    props["vmId"] = json!(vm_id);
    props["timeCreated"] = json!(wire::now_rfc3339());
    let mut custom_data = None;
    if let Some(os) = props.get_mut("osProfile").and_then(Value::as_object_mut) {
        custom_data = os.remove("customData").and_then(|v| v.as_str().map(str::to_string));
        os.remove("adminPassword");
        os.insert("requireGuestProvisionSignal".to_string(), json!(true));
    }
    (doc, custom_data)
}
