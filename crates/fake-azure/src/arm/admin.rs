//! The admin API under `/_admin` (no token, no api-version) and the operations it shares with the Rust
//! handle: fault injection, spot eviction, token minting and a state dump for assertions.
//!
//! - `POST /_admin/faults` with one `Fault` or an array → 204; `GET` lists them; `DELETE` clears them.
//! - `POST /_admin/vms/<name>/evict` → 204, or 404 when no such VM.
//! - `POST /_admin/token` → `{"access_token": "..."}` for hand-made requests.
//! - `GET /_admin/state` → `{"vms":[...],"nics":[...],"vmPuts":{...},"requests":N}`.

use std::sync::Arc;

use serde_json::{json, Value};

use super::compute::render_vm;
use super::faults::Fault;
use super::state::Shared;
use super::token;
use super::wire::{ArmRequest, ArmResponse};

pub fn handle(shared: &Arc<Shared>, request: &ArmRequest, segments: &[&str]) -> ArmResponse {
    use hyper::Method;
    match (&request.method, segments) {
        (&Method::POST, ["faults"]) => {
            let faults: Result<Vec<Fault>, _> = serde_json::from_slice::<Vec<Fault>>(&request.body)
                .or_else(|_| serde_json::from_slice::<Fault>(&request.body).map(|fault| vec![fault]));
            match faults {
                Ok(faults) => {
                    shared.lock().faults.extend(faults);
                    ArmResponse::empty(204)
                }
                Err(err) => ArmResponse::error(400, "InvalidRequestContent", &format!("not a fault: {err}")),
            }
        }
        (&Method::GET, ["faults"]) => ArmResponse::json(200, json!(shared.lock().faults)),
        (&Method::DELETE, ["faults"]) => {
            shared.lock().faults.clear();
            ArmResponse::empty(204)
        }
        (&Method::POST, ["vms", name, "evict"]) => {
            if evict(shared, name) {
                ArmResponse::empty(204)
            } else {
                ArmResponse::error(404, "ResourceNotFound", &format!("No VM named '{name}'."))
            }
        }
        (&Method::POST, ["token"]) => ArmResponse::json(200, json!({ "access_token": token::mint(shared) })),
        (&Method::GET, ["state"]) => ArmResponse::json(200, dump(shared)),
        _ => ArmResponse::error(
            404,
            "NotFound",
            &format!("No admin endpoint {} {}.", request.method, request.path),
        ),
    }
}

/// Spot eviction with policy Delete: Azure deletes the VM (and the NICs set to go with it) at once. The
/// registrar hears of it, as the cloud node lifecycle controller would. False when no VM has that name.
pub fn evict(shared: &Arc<Shared>, name: &str) -> bool {
    let removed = {
        let mut state = shared.lock();
        let key = state.vms.keys().find(|(_, n)| n.eq_ignore_ascii_case(name)).cloned();
        key.map(|key| state.remove_vm(&key)).is_some()
    };
    if removed {
        if let Some(registrar) = shared.config.registrar.clone() {
            let name = name.to_string();
            tokio::spawn(async move {
                if let Err(err) = registrar.deregister(name.clone()).await {
                    eprintln!("fake-arm: deregistering node {name} failed: {err}");
                }
            });
        }
    }
    removed
}

/// Everything a test may want to assert on, as JSON.
pub fn dump(shared: &Shared) -> Value {
    let state = shared.lock();
    let vms: Vec<Value> = state
        .vms
        .values()
        .map(|vm| {
            json!({
                "name": vm.name,
                "resourceGroup": vm.resource_group,
                "provisioningState": vm.phase.provisioning_state(),
                "vmSize": vm.vm_size,
                "zone": vm.zone,
                "spot": vm.spot,
                "document": render_vm(vm, false),
            })
        })
        .collect();
    let nics: Vec<Value> = state.nics.values().map(|nic| nic.document.clone()).collect();
    json!({ "vms": vms, "nics": nics, "vmPuts": state.vm_puts, "requests": state.requests.len() })
}
