//! `Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>`: GET of the configured subnets, and the
//! check a NIC PUT makes of the subnet its IP configurations reference.
//!
//! Errors as ARM words them: a subnet missing from a virtual network that exists is 404 `NotFound`
//! ("Resource <id> not found."), a missing virtual network is 404 `ResourceNotFound`, a missing resource
//! group 404 `ResourceGroupNotFound`; a NIC referencing a missing subnet is 400
//! `InvalidResourceReference`. `FakeArmConfig::default()` has one subnet, `rg/vnet/nodes` (10.224.0.0/16),
//! the cluster subnet the e2e controller is configured with.

use serde_json::{json, Value};

use super::state::{Shared, State};
use super::wire::{self, ArmError, ArmResponse};

pub const SUBNET_TYPE: &str = "Microsoft.Network/virtualNetworks/subnets";

/// A subnet that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeSubnet {
    pub resource_group: String,
    pub virtual_network: String,
    pub name: String,
    pub address_prefix: String,
}

impl FakeSubnet {
    pub fn new(resource_group: &str, virtual_network: &str, name: &str, address_prefix: &str) -> FakeSubnet {
        FakeSubnet {
            resource_group: resource_group.into(),
            virtual_network: virtual_network.into(),
            name: name.into(),
            address_prefix: address_prefix.into(),
        }
    }

    /// Its ARM ID in `subscription`.
    pub fn id(&self, subscription: &str) -> String {
        format!(
            "/subscriptions/{subscription}/resourceGroups/{}/providers/Microsoft.Network/virtualNetworks/{}/subnets/{}",
            self.resource_group, self.virtual_network, self.name
        )
    }

    fn is(&self, rg: &str, vnet: &str, name: &str) -> bool {
        self.in_vnet(rg, vnet) && self.name.eq_ignore_ascii_case(name)
    }

    fn in_vnet(&self, rg: &str, vnet: &str) -> bool {
        self.resource_group.eq_ignore_ascii_case(rg) && self.virtual_network.eq_ignore_ascii_case(vnet)
    }
}

/// The subnets `FakeArmConfig::default()` has.
pub fn default_subnets() -> Vec<FakeSubnet> {
    vec![FakeSubnet::new("rg", "vnet", "nodes", "10.224.0.0/16")]
}

pub fn get_subnet(shared: &Shared, rg: &str, vnet: &str, name: &str) -> ArmResponse {
    let state = shared.lock();
    let subscription = &shared.config.subscription_id;
    match state.subnets.iter().find(|s| s.is(rg, vnet, name)) {
        Some(subnet) => ArmResponse::json(200, document(subnet, subscription)),
        None => missing(shared, &state, rg, vnet, name).into_response(),
    }
}

fn document(subnet: &FakeSubnet, subscription: &str) -> Value {
    json!({
        "name": subnet.name,
        "id": subnet.id(subscription),
        "etag": format!("W/\"{}\"", wire::uuid_from(subnet.name.len() as u64, 0x5b)),
        "type": SUBNET_TYPE,
        "properties": {
            "provisioningState": "Succeeded",
            "addressPrefix": subnet.address_prefix,
            "privateEndpointNetworkPolicies": "Disabled",
            "privateLinkServiceNetworkPolicies": "Enabled",
        },
    })
}

fn missing(shared: &Shared, state: &State, rg: &str, vnet: &str, name: &str) -> ArmError {
    let subscription = &shared.config.subscription_id;
    if state.subnets.iter().any(|s| s.in_vnet(rg, vnet)) {
        let id = FakeSubnet::new(rg, vnet, name, "").id(subscription);
        return ArmError::new(404, "NotFound", &format!("Resource {id} not found."));
    }
    let rg_exists = shared.has_resource_group(rg).is_some()
        || state.subnets.iter().any(|s| s.resource_group.eq_ignore_ascii_case(rg));
    if rg_exists {
        return ArmError::resource_not_found("Microsoft.Network/virtualNetworks", vnet, rg);
    }
    ArmError::new(404, "ResourceGroupNotFound", &format!("Resource group '{rg}' could not be found."))
}

/// Every subnet a NIC body's IP configurations reference must exist.
pub fn check_nic_subnets(shared: &Shared, state: &State, body: &Value, nic_id: &str) -> Result<(), ArmError> {
    let configurations = body.pointer("/properties/ipConfigurations").and_then(Value::as_array);
    for configuration in configurations.into_iter().flatten() {
        let Some(id) = configuration.pointer("/properties/subnet/id").and_then(Value::as_str) else {
            continue;
        };
        let exists =
            state.subnets.iter().any(|s| s.id(&shared.config.subscription_id).eq_ignore_ascii_case(id));
        if !exists {
            return Err(ArmError::new(
                400,
                "InvalidResourceReference",
                &format!("Resource {id} referenced by resource {nic_id} was not found. Please make sure that the referenced resource exists, and that both resources are in the same region."),
            ));
        }
    }
    Ok(())
}
