//! What Compute checks and fills in of a VM create's OS disk (`properties.storageProfile.osDisk`):
//! - a disk encryption set (`managedDisk.diskEncryptionSet.id`) must be a fully qualified resource ID,
//!   or ARM refuses the create with `LinkedInvalidPropertyId`;
//! - the VM as stored and read back names its managed OS disk (`managedDisk.id`, a
//!   `Microsoft.Compute/disks` resource named as the request named the disk) and keeps the encryption
//!   set, as Compute's VM documents do. An ephemeral OS disk (`diffDiskSettings`) has no disk resource.

use serde_json::{json, Value};

use super::wire::{self, ArmError};

const DES_PATH: &str = "/properties/storageProfile/osDisk/managedDisk/diskEncryptionSet/id";

/// Refuses a create whose disk encryption set ID is not a resource ID.
pub fn check_os_disk(body: &Value) -> Result<(), ArmError> {
    let Some(id) = body.pointer(DES_PATH) else { return Ok(()) };
    let id = id.as_str().unwrap_or_default();
    if id.to_ascii_lowercase().starts_with("/subscriptions/")
        && id.split('/').filter(|p| !p.is_empty()).count() == 8
    {
        return Ok(());
    }
    Err(ArmError::new(
        400,
        "LinkedInvalidPropertyId",
        &format!(
            "Property id '{id}' at path 'properties.storageProfile.osDisk.managedDisk.diskEncryptionSet.id' is \
             invalid. Expect fully qualified resource Id that start with '/subscriptions/{{subscriptionId}}' or \
             '/providers/{{resourceProviderNamespace}}/'."
        ),
    ))
}

/// Adds the managed OS disk's resource ID to a VM document about to be stored.
pub fn fill_in_managed_disk(doc: &mut Value, subscription: &str, rg: &str) {
    let Some(os_disk) = doc.pointer_mut("/properties/storageProfile/osDisk") else { return };
    if os_disk.get("diffDiskSettings").is_some() {
        return;
    }
    let Some(name) = os_disk.get("name").and_then(Value::as_str).map(str::to_string) else { return };
    if !os_disk.get("managedDisk").is_some_and(Value::is_object) {
        os_disk["managedDisk"] = json!({});
    }
    os_disk["managedDisk"]["id"] =
        json!(wire::resource_id(subscription, rg, "Microsoft.Compute/disks", &name));
}
