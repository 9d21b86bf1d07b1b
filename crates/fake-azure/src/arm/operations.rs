//! Long-running-operation status: the documents behind the `Azure-AsyncOperation` and `Location` URLs the
//! fake hands out for Compute and Network operations.
//!
//! `Azure-AsyncOperation` answers 200 `{"status":"InProgress"|"Succeeded"|"Failed","error":{...}}` (with
//! `Retry-After` while running); `Location` (`monitor=true`) answers 202 while running, then the final
//! resource (200), 204 when there is none, or the operation's error with its HTTP status.

use serde_json::json;
use tokio::time::Instant;

use super::compute::render_vm;
use super::state::Shared;
use super::wire::{self, ArmRequest, ArmResponse};

/// `GET .../locations/<loc>/operations/<id>`: the `Azure-AsyncOperation` status document, or with
/// `monitor=true` the `Location` semantics (202 while running, then the final result).
pub fn status(shared: &Shared, request: &ArmRequest, op_id: &str) -> ArmResponse {
    let state = shared.lock();
    let Some(op) = state.operations.get(op_id) else {
        return ArmResponse::error(404, "NotFound", &format!("The operation '{op_id}' could not be found."));
    };
    let done = op.until <= Instant::now();
    let monitor = request.query_param("monitor").is_some_and(|m| m.eq_ignore_ascii_case("true"));
    if monitor {
        return match (&op.outcome, done) {
            (_, false) => ArmResponse::empty(202).with_retry_after(shared.config.lro_retry_after),
            (Err(err), true) => err.clone().into_response(),
            (Ok(()), true) => match op.vm.as_ref().and_then(|key| state.vms.get(key)) {
                Some(vm) => ArmResponse::json(200, render_vm(vm, false)),
                None => ArmResponse::empty(204),
            },
        };
    }
    let mut doc = json!({ "name": op_id, "startTime": op.start_time });
    match (&op.outcome, done) {
        (_, false) => {
            doc["status"] = json!("InProgress");
            return ArmResponse::json(200, doc).with_retry_after(shared.config.lro_retry_after);
        }
        (Ok(()), true) => doc["status"] = json!("Succeeded"),
        (Err(err), true) => {
            doc["status"] = json!("Failed");
            doc["error"] = err.detail();
        }
    }
    doc["endTime"] = json!(wire::now_rfc3339());
    ArmResponse::json(200, doc)
}
