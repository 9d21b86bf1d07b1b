//! What the plan priced is what launches: a seed-like NodePool (spot and on-demand, three zones) is
//! solved on the eastus catalog, each planned claim becomes the NodeClaim provisioning creates, and the
//! production Azure provider launches it against the fake ARM. The launched VMs, priced at their
//! offerings, cost exactly the plan's `price_per_hour`; spot launches where spot is cheaper, on-demand
//! where spot is dearer or a pod asks for on-demand; and a zone spread stays in the zones it was given.

use crate::support::solver_fixtures;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_azure::arm::{FakeArm, FakeArmConfig, FakeSubnet};
use karpenter_azure::apis::{AKSNodeClass, NodePool};
use karpenter_azure::catalog::{instance_types, CapacityOptions, PriceTable, UnavailableOfferings};
use karpenter_azure::cloud::azure::instancetypes::Catalog;
use karpenter_azure::cloud::azure::launch;
use karpenter_azure::cloud::azure::nodeclass::checks::NodeClassChecks;
use karpenter_azure::cloud::azure::nodeclass::status::nodeclass_status;
use karpenter_azure::cloud::azure::{ArmClients, AzureCloudProvider, RetrySettings};
use karpenter_azure::cloud::CloudProvider;
use karpenter_azure::controllers::nodeclaim::build;
use karpenter_azure::model::labels::{LABEL_CAPACITY_TYPE, LABEL_SKU_FAMILY, LABEL_ZONE};
use karpenter_azure::model::requirements::Requirement;
use karpenter_azure::model::{CapacityType, InstanceType};
use karpenter_azure::scheduling::{from_k8s, solve, Plan, SolveInput};
use solver_fixtures::{pods, requirements, spread, GI};

/// The seed article's example pool: both capacity types, three zones, amd64.
const SEED_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general, uid: 7}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-1, eastus-2, eastus-3]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
"#;

/// eastus's static on-demand prices with spot at `spot_ratio` of on-demand for every size whose name
/// `spot_applies` accepts (the others keep spot = on-demand, as before a live update).
fn prices(spot_ratio: f64, spot_applies: impl Fn(&str) -> bool) -> PriceTable {
    let mut table = PriceTable::static_for_region("eastus");
    let sizes: Vec<(String, f64)> =
        table.iter().filter_map(|(sku, p)| Some((sku.to_string(), p.on_demand?))).collect();
    for (sku, on_demand) in sizes {
        if spot_applies(&sku) {
            table.set_spot(&sku, on_demand * spot_ratio);
        }
    }
    table
}

fn catalog(prices: &PriceTable) -> Vec<InstanceType> {
    let options = CapacityOptions::default();
    instance_types("eastus", &options, prices, &UnavailableOfferings::new(), Duration::ZERO).unwrap()
}

/// The offering price the catalog gives a launched VM.
fn offering_price(types: &[InstanceType], size: &str, zone: &str, capacity_type: CapacityType) -> f64 {
    let t = types.iter().find(|t| t.name == size).unwrap_or_else(|| panic!("{size} not in the catalog"));
    t.offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .unwrap_or_else(|| panic!("{size} has no {zone}/{capacity_type:?} offering"))
        .price
}

struct Launched {
    size: String,
    zone: String,
    capacity_type: CapacityType,
}

/// Solves `input`, then creates each planned claim as provisioning and the lifecycle controller would.
async fn plan_and_launch(input: &SolveInput, types: &[InstanceType]) -> (Plan, Vec<Launched>) {
    let fake = FakeArm::start(FakeArmConfig::default()).await.expect("fake ARM starts");
    let arm = fake.arm_settings(RetrySettings {
        max_retries: 3,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(100),
        max_total_elapsed: Duration::from_secs(10),
    });
    let clients = ArmClients::new(&arm).expect("clients build");
    let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
    let catalog = Catalog::for_region("eastus", unavailable, Arc::new(|| Duration::ZERO)).unwrap();
    let provider = AzureCloudProvider::new(clients, fake.launch_settings(), Arc::new(catalog));
    let class = resolved_class(&provider, &fake).await;
    let pool: NodePool = serde_yaml::from_str(SEED_POOL).unwrap();

    let plan = solve(input);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut launched = Vec::new();
    for (i, planned) in plan.nodeclaims.iter().enumerate() {
        let mut claim = build(planned, &pool, Some(&class));
        claim.metadata.name = Some(format!("general-{i:05}"));
        let request = launch::request(&claim, Some(&class), types).unwrap();
        let instance = provider.create(&request).await.unwrap_or_else(|e| panic!("claim {i}: {e}"));
        let vm = fake.vm(&instance.name).expect("the VM exists");
        assert_eq!(vm.vm_size, instance.instance_type);
        assert_eq!(vm.spot, instance.capacity_type == CapacityType::Spot);
        launched.push(Launched {
            size: instance.instance_type,
            zone: instance.zone.expect("the seed pool is zonal"),
            capacity_type: instance.capacity_type,
        });
    }
    (plan, launched)
}

async fn resolved_class(provider: &AzureCloudProvider, fake: &FakeArm) -> AKSNodeClass {
    let mut class: AKSNodeClass = serde_yaml::from_str(
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: default}\nspec: {}\n",
    )
    .unwrap();
    let subnet = fake.subnet_id(&FakeSubnet::new("rg", "vnet", "nodes", ""));
    let mut checks = NodeClassChecks::new();
    let images = checks.images(provider, &class, "1.34.4", Instant::now()).await;
    let subnet = checks.subnet(provider, &class, &subnet, "mc_rg_cluster_eastus", Instant::now()).await;
    let time = serde_json::from_value(serde_json::json!("2025-06-01T00:00:00Z")).unwrap();
    let status = nodeclass_status(&class, "1.34.4", &images, &subnet, &time).unwrap();
    class.status = Some(serde_json::from_value(status).unwrap());
    class
}

fn input(types: Vec<InstanceType>) -> SolveInput {
    let pool: NodePool = serde_yaml::from_str(SEED_POOL).unwrap();
    let pool = from_k8s::nodepool(&pool, &Default::default(), Arc::new(types)).unwrap();
    let mut all = pods("web", 14, 1000, 2 * GI);
    let mut spread_pods = pods("zonal", 6, 2000, 4 * GI);
    for p in &mut spread_pods {
        p.topology_spread.push(spread("zonal", LABEL_ZONE, 1));
    }
    all.extend(spread_pods);
    let mut steady = pods("steady", 3, 500, GI);
    for p in &mut steady {
        p.required_terms.push(requirements(&[Requirement::is_in(LABEL_CAPACITY_TYPE, ["on-demand"])]));
    }
    all.extend(steady);
    SolveInput { pods: all.into_iter().map(Arc::new).collect(), nodepools: vec![pool], ..Default::default() }
}

/// Sum of the launched VMs' offering prices, and the count per capacity type.
fn summary(launched: &[Launched], types: &[InstanceType]) -> (f64, BTreeMap<&'static str, usize>) {
    let mut mix = BTreeMap::new();
    let mut total = 0.0;
    for l in launched {
        total += offering_price(types, &l.size, &l.zone, l.capacity_type);
        *mix.entry(l.capacity_type.as_str()).or_default() += 1;
    }
    (total, mix)
}

#[tokio::test]
async fn launched_vms_cost_what_the_plan_priced_and_spot_wins_where_cheaper() {
    let table = prices(0.2, |_| true);
    let types = catalog(&table);
    let input = input(types.clone());
    let (plan, launched) = plan_and_launch(&input, &types).await;
    let (total, mix) = summary(&launched, &types);
    println!(
        "seed pool, spot at 20 %: {} claims, planned {:.4} $/h, launched {total:.4} $/h, mix {mix:?}",
        plan.nodeclaims.len(),
        plan.price_per_hour
    );
    assert!(
        (total - plan.price_per_hour).abs() < 1e-9,
        "launched {total} $/h, planned {} $/h",
        plan.price_per_hour
    );
    for (planned, l) in plan.nodeclaims.iter().zip(&launched) {
        let wants_on_demand = planned.pods.iter().any(|p| p.contains("/steady-"));
        let expected = if wants_on_demand { CapacityType::OnDemand } else { CapacityType::Spot };
        assert_eq!(l.capacity_type, expected, "{:?}", planned.pods);
        assert_eq!(l.size, planned.instance_type, "the size the plan priced");
        assert_eq!(l.capacity_type, planned.capacity_type, "the capacity type the plan priced");
        // A claim the plan pinned to one zone (the spread's) launches there.
        if let Some(zones) = planned.requirements.get(LABEL_ZONE).and_then(|r| r.finite_values()) {
            assert!(zones.contains(l.zone.as_str()), "{} not in {zones:?}", l.zone);
            if planned.pods.iter().any(|p| p.contains("/zonal-")) {
                assert_eq!(zones.len(), 1, "the spread decided the zone");
                assert_eq!(l.zone, planned.zone);
            }
        }
    }
    assert!(mix.get("spot").copied().unwrap_or(0) >= 1, "{mix:?}");
    assert!(mix.get("on-demand").copied().unwrap_or(0) >= 1, "the steady pods ask for on-demand: {mix:?}");
    // Zonal spread: two zonal pods per zone at most one apart.
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for (planned, l) in plan.nodeclaims.iter().zip(&launched) {
        *per_zone.entry(l.zone.as_str()).or_default() +=
            planned.pods.iter().filter(|p| p.contains("/zonal-")).count();
    }
    let (min, max) = (per_zone.values().min().unwrap(), per_zone.values().max().unwrap());
    assert_eq!(per_zone.len(), 3, "{per_zone:?}");
    assert!(max - min <= 1, "{per_zone:?}");
}

#[tokio::test]
async fn dearer_spot_launches_on_demand_at_the_planned_price() {
    let table = prices(1.5, |_| true);
    let types = catalog(&table);
    let (plan, launched) = plan_and_launch(&input(types.clone()), &types).await;
    let (total, mix) = summary(&launched, &types);
    assert!((total - plan.price_per_hour).abs() < 1e-9, "launched {total}, planned {}", plan.price_per_hour);
    assert_eq!(mix.get("spot"), None, "spot is dearer everywhere: {mix:?}");
}

#[tokio::test]
async fn without_spot_prices_ties_go_to_spot_and_spread_over_zones() {
    // Before a live update spot costs what on-demand costs; upstream's allocation then prefers spot and
    // shuffles the zones, and so do the plan and the launcher.
    let types = catalog(&PriceTable::static_for_region("eastus"));
    let mut input = input(types.clone());
    input.pods.retain(|p| p.name.starts_with("web-"));
    input.pods.extend(pods("more", 40, 1000, 2 * GI).into_iter().map(Arc::new));
    // General-purpose D sizes, which Azure sells as spot (the cheapest sizes overall, burstable B, are not).
    for p in &mut input.pods {
        Arc::make_mut(p).required_terms.push(requirements(&[Requirement::is_in(LABEL_SKU_FAMILY, ["D"])]));
    }
    let (plan, launched) = plan_and_launch(&input, &types).await;
    let (total, mix) = summary(&launched, &types);
    assert!((total - plan.price_per_hour).abs() < 1e-9, "launched {total}, planned {}", plan.price_per_hour);
    for (planned, l) in plan.nodeclaims.iter().zip(&launched) {
        assert_eq!((&l.size, l.capacity_type), (&planned.instance_type, planned.capacity_type));
        let sells_spot = types
            .iter()
            .any(|t| t.name == l.size && t.offerings.iter().any(|o| o.capacity_type == CapacityType::Spot));
        // Burstable B sizes, the cheapest here, are not sold as spot (no LowPriorityCapable).
        let expected = if sells_spot { CapacityType::Spot } else { CapacityType::OnDemand };
        assert_eq!(l.capacity_type, expected, "{}: ties go to spot ({mix:?})", l.size);
    }
    assert!(mix.get("spot").copied().unwrap_or(0) >= 1, "{mix:?}");
    let zones: std::collections::BTreeSet<&str> = launched.iter().map(|l| l.zone.as_str()).collect();
    assert!(launched.len() < 3 || zones.len() > 1, "{} claims all in {zones:?}", launched.len());
}
