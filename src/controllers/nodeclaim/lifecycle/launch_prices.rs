//! The launch's offerings priced as the solver priced them: with NodeOverlays applied, the cloud's
//! catalog prices would rank the sizes of a claim differently from the plan (a size made cheaper by
//! an overlay would lose to the one it beat). Upstream's Azure provider applies the overlays to the
//! instance types it launches from too (`pkg/cloudprovider` `resolveInstanceTypes`, through core's
//! `pkg/cloudprovider/overlay` decorator).

use crate::cloud::{allocation, LaunchRequest};
use crate::model::InstanceType;

/// Prices every offering of `request` as `types` (the pool's overlaid catalog) does and orders the
/// options again by their best offering, then by name, as the launch request does.
pub fn reprice(request: &mut LaunchRequest, types: &[InstanceType]) {
    for option in &mut request.options {
        let Some(it) = types.iter().find(|t| t.name == option.name) else { continue };
        for choice in &mut option.offerings {
            let priced = it
                .offerings
                .iter()
                .find(|o| o.zone == choice.zone && o.capacity_type == choice.capacity_type);
            if let Some(o) = priced {
                choice.price = o.price;
            }
        }
    }
    request.options.sort_by(|a, b| {
        match (allocation::best(&a.offerings), allocation::best(&b.offerings)) {
            (Some(x), Some(y)) => allocation::cheaper(x, y),
            _ => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.name.cmp(&b.name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::{InstanceTypeOption, OfferingChoice};
    use crate::model::{CapacityType, Offering};

    fn option(name: &str, price: f64) -> InstanceTypeOption {
        InstanceTypeOption {
            name: name.into(),
            family: None,
            vcpus: 4,
            accelerated_networking: true,
            ephemeral_os_disk: None,
            image_id: "/CommunityGalleries/g/images/d/versions/1".into(),
            offerings: vec![OfferingChoice {
                zone: "eastus-1".into(),
                capacity_type: CapacityType::OnDemand,
                price,
            }],
        }
    }

    fn priced(name: &str, price: f64) -> InstanceType {
        InstanceType {
            name: name.into(),
            vcpus: 4,
            memory_mib: 8192,
            labels: Default::default(),
            capacity: Default::default(),
            overhead: Default::default(),
            allocatable: Default::default(),
            offerings: vec![Offering {
                zone: "eastus-1".into(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: true,
            }],
        }
    }

    #[test]
    fn an_overlaid_price_reorders_the_launch_options() {
        let mut request = LaunchRequest::for_test(
            "c",
            "general",
            vec![option("Standard_D4als_v6", 0.161), option("Standard_F4s_v2", 0.169)],
        );
        reprice(&mut request, &[priced("Standard_F4s_v2", 0.1183), priced("Standard_D4als_v6", 0.161)]);
        let names: Vec<&str> = request.options.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["Standard_F4s_v2", "Standard_D4als_v6"]);
        assert_eq!(request.options[0].offerings[0].price, 0.1183);
        // A size the catalog does not know keeps the cloud's price.
        reprice(&mut request, &[]);
        assert_eq!(request.options[0].name, "Standard_F4s_v2");
    }
}
