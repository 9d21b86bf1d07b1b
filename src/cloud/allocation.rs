//! Which offering a launch tries first, by upstream's allocation rules
//! (karpenter-provider-azure `pkg/providers/instance/offerings`, allocation strategy "lowest price"):
//! the cheapest offering wins; at equal price spot goes before on-demand and a zonal offering before a
//! regional one; a tie between sizes goes to the name that sorts first; offerings of one size that still
//! tie are shuffled, which spreads a burst of claims over the zones.
//!
//! The shuffle is a hash of the claim name and the offering, not a random draw: a claim whose launch is
//! retried (after a restart, or a transient ARM error) asks for the same VM again, while different
//! claims fall in different zones. Pure: both the Azure provider and the in-memory fake rank with it,
//! so the simulator launches what production would.

use std::cmp::Ordering;

use super::{logical_zone, InstanceTypeOption, LaunchRequest, OfferingChoice};
use crate::model::CapacityType;

/// Every (size, offering) pair of the request, best first.
pub fn ranked(request: &LaunchRequest) -> Vec<(&InstanceTypeOption, &OfferingChoice)> {
    let mut all: Vec<(&InstanceTypeOption, &OfferingChoice)> =
        request.options.iter().flat_map(|o| o.offerings.iter().map(move |f| (o, f))).collect();
    all.sort_by(|a, b| compare(&request.claim_name, a, b));
    all
}

/// Two offerings by the rules before any tie-break: lower price, then spot, then zonal.
pub fn cheaper(a: &OfferingChoice, b: &OfferingChoice) -> Ordering {
    a.price
        .total_cmp(&b.price)
        .then_with(|| spot_first(a).cmp(&spot_first(b)))
        .then_with(|| regional(a).cmp(&regional(b)))
}

/// A size's best offering by [`cheaper`]; None when it has none.
pub fn best(offerings: &[OfferingChoice]) -> Option<&OfferingChoice> {
    offerings.iter().min_by(|a, b| cheaper(a, b))
}

fn compare(
    claim: &str,
    (a_type, a): &(&InstanceTypeOption, &OfferingChoice),
    (b_type, b): &(&InstanceTypeOption, &OfferingChoice),
) -> Ordering {
    cheaper(a, b)
        .then_with(|| a_type.name.cmp(&b_type.name))
        .then_with(|| shuffle(claim, a).cmp(&shuffle(claim, b)))
        .then_with(|| a.zone.cmp(&b.zone))
}

fn spot_first(o: &OfferingChoice) -> u8 {
    match o.capacity_type {
        CapacityType::Spot => 0,
        CapacityType::OnDemand => 1,
    }
}

fn regional(o: &OfferingChoice) -> bool {
    logical_zone(&o.zone).is_none()
}

/// A stable 64-bit FNV-1a hash of the claim and the offering: the same on every run and platform, so a
/// claim's order does not change across restarts or toolchain updates.
fn shuffle(claim: &str, o: &OfferingChoice) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let parts = [claim.as_bytes(), b"\0", o.zone.as_bytes(), b"\0", o.capacity_type.as_str().as_bytes()];
    parts.iter().flat_map(|p| p.iter()).fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn offering(zone: &str, capacity_type: CapacityType, price: f64) -> OfferingChoice {
        OfferingChoice { zone: zone.into(), capacity_type, price }
    }

    fn option(name: &str, offerings: Vec<OfferingChoice>) -> InstanceTypeOption {
        InstanceTypeOption {
            name: name.into(),
            family: None,
            vcpus: 4,
            accelerated_networking: false,
            ephemeral_os_disk: None,
            image_id: "image".into(),
            offerings,
        }
    }

    fn request(claim: &str, options: Vec<InstanceTypeOption>) -> LaunchRequest {
        LaunchRequest::for_test(claim, "default", options)
    }

    fn order(request: &LaunchRequest) -> Vec<String> {
        ranked(request)
            .into_iter()
            .map(|(t, o)| format!("{}/{}/{}", t.name, o.zone, o.capacity_type.as_str()))
            .collect()
    }

    #[test]
    fn cheapest_first_across_sizes_whatever_the_option_order() {
        let r = request(
            "c",
            vec![
                option("B", vec![offering("eastus-1", CapacityType::OnDemand, 0.2)]),
                option("A", vec![offering("eastus-1", CapacityType::Spot, 0.05)]),
            ],
        );
        assert_eq!(order(&r), ["A/eastus-1/spot", "B/eastus-1/on-demand"]);
    }

    #[test]
    fn equal_prices_go_to_spot_then_zonal_then_the_first_name() {
        let r = request(
            "c",
            vec![
                option("B", vec![offering("eastus-1", CapacityType::Spot, 0.1)]),
                option(
                    "A",
                    vec![
                        offering("eastus-1", CapacityType::OnDemand, 0.1),
                        offering("", CapacityType::Spot, 0.1),
                        offering("eastus-2", CapacityType::Spot, 0.1),
                    ],
                ),
            ],
        );
        assert_eq!(order(&r), ["A/eastus-2/spot", "B/eastus-1/spot", "A//spot", "A/eastus-1/on-demand"]);
    }

    #[test]
    fn ties_are_stable_per_claim_and_spread_over_claims() {
        let zones = ["eastus-1", "eastus-2", "eastus-3"];
        let options =
            || vec![option("A", zones.iter().map(|z| offering(z, CapacityType::Spot, 0.1)).collect())];
        let first = |claim: &str| order(&request(claim, options()))[0].clone();
        assert_eq!(first("default-abcde"), first("default-abcde"));
        let chosen: BTreeSet<String> = (0..30).map(|i| first(&format!("default-{i}"))).collect();
        assert_eq!(chosen.len(), 3, "30 claims use every tied zone: {chosen:?}");
    }
}
