//! Instance types built from the embedded catalog: labels, offerings, filters, ordering and rendering.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_azure::catalog::instancetype::{build_instance_types, passes_global_filters};
use karpenter_azure::catalog::{
    embedded_sku, instance_types, render, CapacityOptions, CatalogError, OutputFormat, PriceTable, SkuRecord,
    UnavailableOfferings, UnavailableReason,
};
use karpenter_azure::model::labels;
use karpenter_azure::model::resources::{CPU, NVIDIA_GPU, PODS};
use karpenter_azure::model::{CapacityType, InstanceType};

const NOW: Duration = Duration::from_secs(1_700_000_000);

fn eastus() -> Vec<InstanceType> {
    instance_types(
        "eastus",
        &CapacityOptions::default(),
        &PriceTable::static_for_region("eastus"),
        &UnavailableOfferings::new(),
        NOW,
    )
    .unwrap()
}

fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
    types.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} missing"))
}

fn build(skus: &[SkuRecord], pricing: &PriceTable, unavailable: &UnavailableOfferings) -> Vec<InstanceType> {
    let zones = ["1".to_string(), "2".to_string(), "3".to_string()];
    build_instance_types(skus, "eastus", &zones, &CapacityOptions::default(), pricing, unavailable, NOW)
}

#[test]
fn d4s_v5_in_eastus() {
    let types = eastus();
    let d4 = find(&types, "Standard_D4s_v5");
    assert_eq!(d4.allocatable.get(CPU), 3860);
    assert_eq!(d4.allocatable.get(PODS), 250);
    assert_eq!(d4.offerings.len(), 6, "3 zones × on-demand and spot");
    for offering in &d4.offerings {
        assert!(offering.available);
        // No live spot price: spot is priced like on-demand.
        assert_eq!(offering.price, 0.192);
    }
    assert_eq!(d4.available_zones(), vec!["eastus-1", "eastus-2", "eastus-3"]);
}

#[test]
fn d4s_v5_labels() {
    let types = eastus();
    let expected: BTreeMap<String, String> = [
        (labels::LABEL_INSTANCE_TYPE, "Standard_D4s_v5"),
        (labels::LABEL_SKU_NAME, "Standard_D4s_v5"),
        (labels::LABEL_ARCH, "amd64"),
        (labels::LABEL_OS, "linux"),
        (labels::LABEL_REGION, "eastus"),
        (labels::LABEL_SKU_FAMILY, "D"),
        (labels::LABEL_SKU_SERIES, "Ds_v5"),
        (labels::LABEL_SKU_VERSION, "5"),
        (labels::LABEL_SKU_CPU, "4"),
        (labels::LABEL_AKS_SKU_CPU, "4"),
        (labels::LABEL_SKU_MEMORY, "16384"),
        (labels::LABEL_AKS_SKU_MEMORY, "16384"),
        (labels::LABEL_SKU_GPU_COUNT, "0"),
        (labels::LABEL_SKU_NETWORKING_ACCELERATED, "true"),
        (labels::LABEL_SKU_STORAGE_PREMIUM_CAPABLE, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(find(&types, "Standard_D4s_v5").labels, expected);
}

#[test]
fn gpu_and_arm_labels() {
    let types = eastus();
    let a100 = find(&types, "Standard_NC24ads_A100_v4");
    assert_eq!(a100.labels[labels::LABEL_SKU_GPU_NAME], "A100");
    assert_eq!(a100.labels[labels::LABEL_SKU_GPU_MANUFACTURER], "nvidia");
    assert_eq!(a100.labels[labels::LABEL_SKU_GPU_COUNT], "1");
    assert_eq!(a100.labels[labels::LABEL_SKU_SERIES], "NCads_v4");
    assert_eq!(a100.labels[labels::LABEL_SKU_FAMILY], "N");
    assert_eq!(a100.allocatable.get(NVIDIA_GPU), 1);
    let nc6 = find(&types, "Standard_NC6s_v3");
    assert_eq!(nc6.labels[labels::LABEL_SKU_STORAGE_EPHEMERAL_OS_MAX_SIZE], "790");
    assert!(!nc6.labels.contains_key(labels::LABEL_SKU_GPU_NAME), "no accelerator segment in the name");
    let arm = find(&types, "Standard_D4ps_v5");
    assert_eq!(arm.labels[labels::LABEL_ARCH], "arm64");
}

#[test]
fn spot_only_for_low_priority_capable_sizes() {
    let mut regular_only = embedded_sku("Standard_D4s_v5").unwrap().clone();
    regular_only.low_priority_capable = Some(false);
    let pricing = PriceTable::static_for_region("eastus");
    let types = build(&[regular_only], &pricing, &UnavailableOfferings::new());
    let offerings = &types[0].offerings;
    assert_eq!(offerings.len(), 3);
    assert!(offerings.iter().all(|o| o.capacity_type == CapacityType::OnDemand));
}

#[test]
fn live_spot_price_is_used() {
    let mut live = PriceTable::new("eastus");
    live.set_spot("Standard_D4s_v5", 0.03);
    let pricing = PriceTable::static_for_region("eastus").merged_with(&live);
    let types =
        build(&[embedded_sku("Standard_D4s_v5").unwrap().clone()], &pricing, &UnavailableOfferings::new());
    let d4 = &types[0];
    assert_eq!(d4.price(CapacityType::Spot), Some(0.03));
    assert_eq!(d4.price(CapacityType::OnDemand), Some(0.192));
    // Offerings are cheapest first: the three spot zones, then on-demand.
    assert_eq!(d4.offerings[0].capacity_type, CapacityType::Spot);
    assert_eq!(d4.offerings[0].zone, "eastus-1");
    assert_eq!(d4.cheapest_available().unwrap().price, 0.03);
}

#[test]
fn global_filters() {
    let base = embedded_sku("Standard_D4s_v5").unwrap().clone();
    assert!(passes_global_filters(&base));
    let restricted = SkuRecord { restricted: true, ..base.clone() };
    let one_cpu = SkuRecord { vcpus: 1, ..base.clone() };
    let small_memory = SkuRecord { memory_mib: 3583, ..base.clone() };
    let just_enough = SkuRecord { memory_mib: 3584, name: "Standard_D4x".into(), ..base.clone() };
    let constrained = SkuRecord { vcpus_available: Some(2), ..base.clone() };
    for rejected in [&restricted, &one_cpu, &small_memory, &constrained] {
        assert!(!passes_global_filters(rejected), "{rejected:?}");
    }
    assert!(passes_global_filters(&just_enough));

    let types = eastus();
    for absent in
        ["Standard_B1s", "Standard_A1_v2", "Standard_E64i_v3", "Standard_E32-8s_v3", "Standard_B1ls"]
    {
        assert!(types.iter().all(|t| t.name != absent), "{absent} should be filtered");
    }
}

#[test]
fn unpriced_sizes_are_left_out() {
    let sku = embedded_sku("Standard_D4s_v5").unwrap().clone();
    let types = build(&[sku], &PriceTable::new("eastus"), &UnavailableOfferings::new());
    assert!(types.is_empty());
    // Every embedded eastus type has a positive on-demand price.
    assert!(eastus().iter().all(|t| t.price(CapacityType::OnDemand).is_some_and(|p| p > 0.0)));
}

#[test]
fn unknown_region_lists_known_ones() {
    let err = instance_types(
        "marsnorth",
        &CapacityOptions::default(),
        &PriceTable::new("marsnorth"),
        &UnavailableOfferings::new(),
        NOW,
    )
    .unwrap_err();
    let CatalogError::UnknownRegion { region, known } = &err;
    assert_eq!(region, "marsnorth");
    assert!(known.len() > 60, "every Azure region: {known:?}");
    assert!(known.windows(2).all(|w| w[0] < w[1]));
    assert!(known.contains(&"swedencentral".to_string()) && known.contains(&"usgovvirginia".to_string()));
    assert!(err.to_string().contains("not an Azure region"), "{err}");
    assert_eq!(err.category(), "UnknownRegion");
}

#[test]
fn a_region_without_embedded_data_gets_every_size_at_eastus_prices() {
    let build = |region: &str| {
        let prices = PriceTable::static_or_fallback(region);
        assert_eq!(prices.region(), region);
        instance_types(region, &CapacityOptions::default(), &prices, &UnavailableOfferings::new(), NOW)
            .unwrap()
    };
    let sweden = build("swedencentral");
    let d4 = sweden.iter().find(|t| t.name == "Standard_D4s_v5").expect("D4s_v5 offered");
    assert_eq!(d4.price(CapacityType::OnDemand), Some(0.192), "eastus's static price");
    assert_eq!(d4.available_zones(), ["swedencentral-1", "swedencentral-2", "swedencentral-3"]);
    assert_eq!(d4.labels.get("topology.kubernetes.io/region").map(String::as_str), Some("swedencentral"));
    // A region without availability zones: regional offerings (zone ""), as upstream's non-zonal ones.
    let west_central = build("westcentralus");
    let d4 = west_central.iter().find(|t| t.name == "Standard_D4s_v5").unwrap();
    assert!(d4.offerings.iter().all(|o| o.zone.is_empty()), "{:?}", d4.offerings);
    assert_eq!(d4.offerings.len(), 2, "one on-demand and one spot offering");
    assert_eq!(sweden.len(), build("eastus").len());
}

#[test]
fn sorted_cheapest_first_then_by_name() {
    let types = eastus();
    assert!(types.len() > 900, "{}", types.len());
    for pair in types.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (pa, pb) = (a.offerings[0].price, b.offerings[0].price);
        assert!(pa < pb || (pa == pb && a.name < b.name), "{} before {}", a.name, b.name);
    }
    // Deterministic: a second build is identical.
    assert_eq!(types, eastus());
}

#[test]
fn unavailable_offerings_are_marked_not_dropped() {
    let mut cache = UnavailableOfferings::new();
    cache.mark(
        UnavailableReason::ZonalAllocationFailed,
        CapacityType::OnDemand,
        "Standard_D4s_v5",
        "eastus-2",
        NOW,
    );
    let pricing = PriceTable::static_for_region("eastus");
    let skus = [embedded_sku("Standard_D4s_v5").unwrap().clone()];
    let d4 = &build(&skus, &pricing, &cache)[0];
    let blocked: Vec<_> =
        d4.offerings.iter().filter(|o| !o.available).map(|o| (&o.zone, o.capacity_type)).collect();
    assert_eq!(blocked.len(), 2);
    assert!(blocked.iter().all(|(zone, _)| zone.as_str() == "eastus-2"));
    assert_eq!(d4.available_zones(), vec!["eastus-1", "eastus-3"]);
    // After the TTL the offerings come back.
    let later = build_instance_types(
        &skus,
        "eastus",
        &["1".into(), "2".into(), "3".into()],
        &CapacityOptions::default(),
        &pricing,
        &cache,
        NOW + Duration::from_secs(3600),
    );
    assert!(later[0].offerings.iter().all(|o| o.available));
}

#[test]
fn renders_table_and_json() {
    // Given most expensive first; rendering must still list the cheapest first.
    let all = eastus();
    let types: Vec<InstanceType> = ["Standard_D8s_v5", "Standard_D4s_v5", "Standard_D2s_v5"]
        .into_iter()
        .map(|name| find(&all, name).clone())
        .collect();
    let table = render(&types, OutputFormat::Table);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for column in
        ["NAME", "VCPU", "ALLOCATABLE CPU", "ALLOCATABLE MEMORY", "ON-DEMAND $/h", "SPOT $/h", "ZONES"]
    {
        assert!(header.contains(column), "{header}");
    }
    let d4 = table.lines().find(|l| l.starts_with("Standard_D4s_v5 ")).unwrap();
    let cells: Vec<&str> = d4.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "Standard_D4s_v5",
            "4",
            "16Gi",
            "3860m",
            "11743Mi",
            "250",
            "0.1920",
            "0.1920",
            "eastus-1,eastus-2,eastus-3"
        ]
    );

    let json: serde_json::Value = serde_json::from_str(&render(&types, OutputFormat::Json)).unwrap();
    let entries = json.as_array().unwrap();
    assert_eq!(entries[0]["name"], "Standard_D2s_v5", "cheapest first");
    let d4 = entries.iter().find(|e| e["name"] == "Standard_D4s_v5").unwrap();
    assert_eq!(d4["vcpus"], 4);
    assert_eq!(d4["memory_mib"], 16384);
    assert_eq!(d4["arch"], "amd64");
    assert_eq!(d4["allocatable"]["cpu"], "3860m");
    assert_eq!(d4["allocatable"]["memory"], "12313637683");
    assert_eq!(d4["allocatable"]["pods"], "250");
    assert_eq!(d4["allocatable"]["ephemeral-storage"], "128G");
    assert_eq!(d4["capacity"]["cpu"], "4");
    assert_eq!(d4["on_demand_price"], 0.192);
    assert_eq!(d4["spot_price"], 0.192);
    assert_eq!(d4["zones"], serde_json::json!(["eastus-1", "eastus-2", "eastus-3"]));
    assert_eq!(d4["labels"][labels::LABEL_SKU_SERIES], "Ds_v5");
    // Stable: rendering twice gives the same bytes.
    assert_eq!(render(&types, OutputFormat::Json), render(&types, OutputFormat::Json));
}
