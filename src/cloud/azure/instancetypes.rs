//! Instance types per AKSNodeClass: the region's sizes — from the Azure Resource SKUs API once it has
//! answered (refreshed every 12 hours), the embedded catalog until then or when it cannot be reached —
//! priced by the Retail Prices API once it has answered (refreshed every 12 hours, as upstream's pricing
//! provider), the static table until then, shaped by the class (maxPods, OS disk) and the operator's network
//! settings, with offerings the unavailable cache blocks marked unavailable, and without the sizes the
//! class cannot launch: those none of its status images boots, and those that cannot honour its
//! `spec.security` (encryption at host, trusted launch; rules in [`crate::catalog::security`], which
//! needs the live list's capabilities). Memoised per class shape, cache generation and SKU list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::apis::aksnodeclass::NodeImage;
use crate::apis::AKSNodeClass;
use crate::catalog::support::SizeRules;
use crate::catalog::{
    self, embedded_sku, CapacityOptions, CatalogError, NodeSecurity, PriceTable, PricingProvider, SkuRecord,
    UnavailableOfferings,
};
use crate::cloud::azure::bootstrap::{labels::class_labels, NodeClassBootstrap};
use crate::cloud::azure::client::ArmClients;
use crate::cloud::azure::imagefamily::image_for;
use crate::cloud::azure::retail::{self, wall_time, RetailPricesClient};
use crate::cloud::azure::skus::{list_region_skus, RegionSku};
use crate::cloud::Clock;
use crate::model::InstanceType;

/// How often the region's sizes are listed again (upstream refreshes instance types every 12 hours).
pub const SKU_REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);
/// After a failed listing, how soon to try again.
const SKU_RETRY_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// (maxPods, osDiskSizeGB, image requirements, security, AKS labels) of a class: what changes
/// allocatable, which sizes it can launch and the labels all its nodes carry.
type ClassShape = (Option<u32>, Option<u32>, String, NodeSecurity, BTreeMap<String, String>, SizeRules);
/// The types of a shape, with the cache generation, SKU-list version and price version they were
/// computed at.
type Memo = BTreeMap<ClassShape, ((u64, u64, u64), Arc<Vec<InstanceType>>)>;
/// The live SKU list, shared with the refresh task.
type LiveSkus = Arc<RwLock<Option<Arc<Vec<RegionSku>>>>>;

pub struct Catalog {
    region: String,
    options: CapacityOptions,
    pricing: PricingProvider,
    unavailable: Arc<Mutex<UnavailableOfferings>>,
    clock: Clock,
    memo: Mutex<Memo>,
    live: LiveSkus,
    live_version: Arc<AtomicU64>,
}

impl Catalog {
    /// Fails when the region is not in the embedded catalog.
    pub fn new(
        region: &str,
        options: CapacityOptions,
        pricing: PriceTable,
        unavailable: Arc<Mutex<UnavailableOfferings>>,
        clock: Clock,
    ) -> Result<Catalog, CatalogError> {
        catalog::instance_types(region, &options, &pricing, &UnavailableOfferings::new(), clock())?;
        Ok(Catalog {
            region: region.to_string(),
            options,
            pricing: PricingProvider::with_static(pricing, wall_time()),
            unavailable,
            clock,
            memo: Mutex::new(BTreeMap::new()),
            live: Arc::new(RwLock::new(None)),
            live_version: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The region's sizes with the default capacity options, priced by the embedded table (the
    /// fallback region's when the region has no prices of its own) until live prices arrive.
    pub fn for_region(
        region: &str,
        unavailable: Arc<Mutex<UnavailableOfferings>>,
        clock: Clock,
    ) -> Result<Catalog, CatalogError> {
        Catalog::new(
            region,
            CapacityOptions::default(),
            PriceTable::static_or_fallback(region),
            unavailable,
            clock,
        )
    }

    /// The prices in effect: the static table given to [`Catalog::new`] until the Retail Prices API has
    /// answered.
    pub fn pricing(&self) -> &PricingProvider {
        &self.pricing
    }

    /// Fetches the region's prices from the Retail Prices API now and then every `interval`
    /// ([`catalog::retail::REFRESH_INTERVAL`] in production); a failed refresh keeps the prices in effect.
    pub fn spawn_price_refresh(
        &self,
        client: RetailPricesClient,
        interval: Duration,
    ) -> tokio::task::JoinHandle<()> {
        retail::spawn_refresh_loop(&self.pricing, client, interval)
    }

    /// The facts of a size: the Resource SKUs API's record once it has answered (it knows sizes newer
    /// than the embedded data), else the embedded one.
    pub fn sku_record(&self, name: &str) -> Option<SkuRecord> {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner()).clone();
        live.iter()
            .flat_map(|skus| skus.iter())
            .find(|s| s.record.name == name)
            .map(|s| s.record.clone())
            .or_else(|| embedded_sku(name).cloned())
    }

    /// The clock that stamps and expires the unavailable cache's marks.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// The cache of offerings Azure refused, shared with the cloud provider.
    pub fn unavailable(&self) -> Arc<Mutex<UnavailableOfferings>> {
        self.unavailable.clone()
    }

    /// The instance types a NodePool on `class` can launch (the defaults when the class is unknown).
    pub fn types_for(&self, class: Option<&AKSNodeClass>) -> Arc<Vec<InstanceType>> {
        let images = class.and_then(|c| c.status.as_ref()).map(|s| s.images.as_slice()).unwrap_or_default();
        let shape: ClassShape = class.map_or(
            (None, None, String::new(), NodeSecurity::default(), BTreeMap::new(), SizeRules::default()),
            |c| {
                (
                    c.spec.max_pods.map(|m| m.max(0) as u32),
                    c.spec.os_disk_size_gb.map(|g| g.max(0) as u32),
                    image_requirements_key(images),
                    NodeSecurity::from_spec(c.spec.security.as_ref()),
                    class_labels(&NodeClassBootstrap::from_class(c)),
                    SizeRules::of(c),
                )
            },
        );
        let now = (self.clock)();
        let mut unavailable = self.unavailable.lock().unwrap_or_else(|p| p.into_inner());
        unavailable.evict_expired(now);
        let version = (unavailable.seq(), self.live_version.load(Ordering::Acquire), self.pricing.version());
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, types)) = memo.get(&shape) {
            if *at == version {
                return types.clone();
            }
        }
        let options = CapacityOptions { max_pods: shape.0, os_disk_size_gb: shape.1, ..self.options.clone() };
        let live = self.live.read().unwrap_or_else(|p| p.into_inner()).clone();
        let prices = self.pricing.current();
        let mut types = match &live {
            Some(skus) => self.live_types(skus, &options, &prices, &unavailable, now),
            // The region was checked in `new`, so this cannot fail; an empty list is the safe fallback.
            None => catalog::instance_types(&self.region, &options, &prices, &unavailable, now)
                .unwrap_or_default(),
        };
        // The live record carries the capabilities (and current generations); the embedded one is what
        // there is before the first listing.
        let live_records: BTreeMap<&str, &SkuRecord> =
            live.iter().flat_map(|skus| skus.iter()).map(|s| (s.record.name.as_str(), &s.record)).collect();
        let record = |name: &str| live_records.get(name).copied().or_else(|| embedded_sku(name));
        let security = shape.3;
        if security != NodeSecurity::default() {
            types.retain(|t| record(&t.name).is_some_and(|sku| security.check(sku).is_ok()));
        }
        // Sizes the class's nodes could not initialize on (GPU support, driver, artifact streaming).
        let rules = shape.5;
        types.retain(|t| record(&t.name).is_none_or(|sku| rules.reason(sku).is_none()));
        // A class without images is not Ready and launches nothing; its sizes are left as they are.
        if !images.is_empty() {
            types.retain(|t| record(&t.name).is_none_or(|sku| image_for(images, sku).is_some()));
        }
        // Every node of the class carries these (the bootstrap sets them), so NodePool requirements on
        // them select sizes as upstream's instance type requirements do.
        for t in &mut types {
            t.labels.extend(shape.4.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let types = Arc::new(types);
        memo.insert(shape, (version, types.clone()));
        types
    }

    /// Instance types from the live SKU list: sizes grouped by the zones they are offered in.
    fn live_types(
        &self,
        skus: &[RegionSku],
        options: &CapacityOptions,
        prices: &PriceTable,
        unavailable: &UnavailableOfferings,
        now: Duration,
    ) -> Vec<InstanceType> {
        let mut by_zones: BTreeMap<&Vec<String>, Vec<crate::catalog::SkuRecord>> = BTreeMap::new();
        for sku in skus {
            by_zones.entry(&sku.zones).or_default().push(sku.record.clone());
        }
        let mut types: Vec<InstanceType> = by_zones
            .into_iter()
            .flat_map(|(zones, records)| {
                catalog::instancetype::build_instance_types(
                    &records,
                    &self.region,
                    zones,
                    options,
                    prices,
                    unavailable,
                    now,
                )
            })
            .collect();
        types.sort_by(|a, b| a.sort_price().total_cmp(&b.sort_price()).then_with(|| a.name.cmp(&b.name)));
        types
    }

    /// Lists the region's sizes from the Resource SKUs API now and then every
    /// [`SKU_REFRESH_INTERVAL`]; a failed listing keeps what was there (the embedded catalog at first).
    pub fn spawn_sku_refresh(&self, clients: ArmClients) -> tokio::task::JoinHandle<()> {
        let (live, version, region) = (self.live.clone(), self.live_version.clone(), self.region.clone());
        tokio::spawn(async move {
            loop {
                let wait = match list_region_skus(&clients, &region).await {
                    Ok(skus) if !skus.is_empty() => {
                        tracing::info!(region = %region, sizes = skus.len(), "listed the region's VM sizes");
                        *live.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(skus));
                        version.fetch_add(1, Ordering::AcqRel);
                        SKU_REFRESH_INTERVAL
                    }
                    Ok(_) => {
                        tracing::warn!(region = %region, "the Resource SKUs API listed no VM sizes; keeping the current list");
                        SKU_RETRY_INTERVAL
                    }
                    Err(e) => {
                        tracing::warn!(region = %region, error = %e, "listing VM sizes failed; keeping the current list");
                        SKU_RETRY_INTERVAL
                    }
                };
                tokio::time::sleep(wait).await;
            }
        })
    }
}

/// The images' requirements (not their versions, which change without changing which sizes fit).
fn image_requirements_key(images: &[NodeImage]) -> String {
    let requirements: Vec<_> = images.iter().map(|i| &i.requirements).collect();
    serde_json::to_string(&requirements).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CapacityType;

    fn catalog() -> Catalog {
        let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
        let clock: Clock = Arc::new(|| Duration::ZERO);
        Catalog::new(
            "eastus",
            CapacityOptions::default(),
            PriceTable::static_for_region("eastus"),
            unavailable,
            clock,
        )
        .unwrap()
    }

    #[test]
    fn a_class_offers_only_sizes_its_nodes_can_run() {
        let catalog = catalog();
        let class = |spec: &str| -> AKSNodeClass {
            serde_yaml::from_str(&format!(
                "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: c}}\nspec: {spec}\n"
            ))
            .unwrap()
        };
        let offers =
            |spec: &str, size: &str| catalog.types_for(Some(&class(spec))).iter().any(|t| t.name == size);
        assert!(
            offers("{}", "Standard_D2ps_v5")
                && !offers("{artifactStreaming: {enabled: true}}", "Standard_D2ps_v5")
        );
        assert!(
            !offers("{}", "Standard_NV4ads_V710_v5")
                && offers("{gpu: {mode: None}}", "Standard_NV4ads_V710_v5")
        );
        assert!(
            !offers("{gpu: {mode: None}}", "Standard_NCC40ads_H100_v5"),
            "no class offers an unknown GPU"
        );
        assert!(
            offers("{}", "Standard_NV12s_v3") && !offers("{imageFamily: AzureLinux}", "Standard_NV12s_v3")
        );
    }

    #[test]
    fn live_sizes_replace_the_embedded_list_once_listed() {
        let catalog = catalog();
        assert!(catalog.types_for(None).len() > 900, "embedded catalog first");
        let live = vec![
            RegionSku {
                record: embedded_sku("Standard_D4s_v5").unwrap().clone(),
                zones: vec!["1".into(), "3".into()],
            },
            RegionSku { record: embedded_sku("Standard_E4s_v5").unwrap().clone(), zones: vec!["2".into()] },
        ];
        *catalog.live.write().unwrap() = Some(Arc::new(live));
        catalog.live_version.fetch_add(1, Ordering::AcqRel);
        let types = catalog.types_for(None);
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["Standard_D4s_v5", "Standard_E4s_v5"]);
        let zones = |i: usize| {
            let mut z: Vec<&str> = types[i].offerings.iter().map(|o| o.zone.as_str()).collect();
            z.sort();
            z.dedup();
            z
        };
        assert_eq!(zones(0), ["eastus-1", "eastus-3"]);
        assert_eq!(zones(1), ["eastus-2"]);
    }

    #[test]
    fn every_size_of_a_class_carries_its_aks_labels_so_requirements_on_them_match() {
        let catalog = catalog();
        let class = |spec: &str| -> AKSNodeClass {
            serde_yaml::from_str(&format!(
                "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: c}}\nspec: {spec}\n"
            ))
            .unwrap()
        };
        let label = |class: &AKSNodeClass, key: &str| -> Vec<Option<String>> {
            let types = catalog.types_for(Some(class));
            let mut values: Vec<Option<String>> = types.iter().map(|t| t.labels.get(key).cloned()).collect();
            values.dedup();
            values
        };
        let ubuntu = class("{}");
        assert_eq!(label(&ubuntu, "kubernetes.azure.com/mode"), [None], "the pool decides the mode");
        assert_eq!(label(&ubuntu, "kubernetes.azure.com/os-sku"), [Some("Ubuntu".to_string())]);
        assert_eq!(label(&ubuntu, "kubernetes.azure.com/fips_enabled"), [None]);
        let fips = class("{imageFamily: AzureLinux, fipsMode: FIPS}");
        assert_eq!(label(&fips, "kubernetes.azure.com/os-sku"), [Some("AzureLinux".to_string())]);
        assert_eq!(label(&fips, "kubernetes.azure.com/fips_enabled"), [Some("true".to_string())]);
        // The memo keeps the classes apart.
        assert_eq!(label(&ubuntu, "kubernetes.azure.com/os-sku"), [Some("Ubuntu".to_string())]);
    }

    #[test]
    fn every_azure_region_starts_and_other_names_do_not() {
        let start = |region: &str| {
            let unavailable = Arc::new(Mutex::new(UnavailableOfferings::new()));
            let prices = PriceTable::static_or_fallback(region);
            Catalog::new(region, CapacityOptions::default(), prices, unavailable, Arc::new(|| Duration::ZERO))
        };
        let sweden = start("swedencentral").expect("a real region without embedded data starts");
        let types = sweden.types_for(None);
        let d4 = types.iter().find(|t| t.name == "Standard_D4s_v5").expect("embedded sizes until listed");
        assert_eq!(d4.price(CapacityType::OnDemand), Some(0.192), "eastus's prices until live ones");
        assert_eq!(d4.available_zones(), ["swedencentral-1", "swedencentral-2", "swedencentral-3"]);
        assert_eq!(sweden.pricing().current().region(), "swedencentral");
        let err = start("marsnorth").err().expect("not an Azure region");
        assert_eq!(err.category(), "UnknownRegion");
    }

    #[test]
    fn live_prices_reprice_the_sizes_once_installed() {
        let catalog = catalog();
        let spot_of = |types: &[InstanceType]| {
            types.iter().find(|t| t.name == "Standard_D4s_v5").and_then(|t| t.price(CapacityType::Spot))
        };
        assert_eq!(spot_of(&catalog.types_for(None)), Some(0.192), "spot priced as on-demand until live");
        let mut live = PriceTable::new("eastus");
        live.set_spot("Standard_D4s_v5", 0.03);
        catalog.pricing().install(&live, wall_time());
        assert_eq!(spot_of(&catalog.types_for(None)), Some(0.03));
    }

    #[test]
    fn listed_sizes_without_a_static_price_are_offered_once_live_prices_have_one() {
        let catalog = catalog();
        let new_size =
            SkuRecord { name: "Standard_D4s_v9".into(), ..embedded_sku("Standard_D4s_v5").unwrap().clone() };
        let non_zonal = embedded_sku("Standard_E4s_v5").unwrap().clone();
        *catalog.live.write().unwrap() = Some(Arc::new(vec![
            RegionSku { record: new_size.clone(), zones: vec!["1".into()] },
            RegionSku { record: non_zonal, zones: vec![] },
        ]));
        catalog.live_version.fetch_add(1, Ordering::AcqRel);
        let names = |types: &[InstanceType]| types.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        let types = catalog.types_for(None);
        assert_eq!(names(&types), ["Standard_E4s_v5"], "no price yet for the new size");
        assert!(types[0].offerings.iter().all(|o| o.zone.is_empty()), "listed without zones: regional");
        let mut live = PriceTable::new("eastus");
        live.set_on_demand("Standard_D4s_v9", 0.15);
        catalog.pricing().install(&live, wall_time());
        let types = catalog.types_for(None);
        assert_eq!(names(&types), ["Standard_D4s_v9", "Standard_E4s_v5"]);
        assert_eq!(catalog.sku_record("Standard_D4s_v9"), Some(new_size), "the live record, for the launch");
    }

    #[test]
    fn classes_asking_for_security_get_only_sizes_that_honour_it() {
        let catalog = catalog();
        let class = |security: &str| -> AKSNodeClass {
            serde_yaml::from_str(&format!(
                "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: c}}\nspec: {{security: {security}}}\n"
            ))
            .unwrap()
        };
        let names = |class: &AKSNodeClass| -> Vec<String> {
            catalog.types_for(Some(class)).iter().map(|t| t.name.clone()).collect()
        };
        let eah = class("{encryptionAtHost: true}");
        let tl = class("{trustedLaunch: {vtpm: true}}");
        let both = class("{encryptionAtHost: true, trustedLaunch: {secureBoot: true}}");
        assert!(names(&eah).is_empty(), "embedded data: encryption at host unknown, so not offered");
        assert!(names(&tl).contains(&"Standard_D4s_v5".to_string()), "unknown TL, gen2: offered");
        assert!(!names(&tl).contains(&"Standard_D2_v2".to_string()), "unknown TL, gen1-only: not offered");
        let live = |name: &str, eah: Option<bool>, tl_disabled: Option<bool>| RegionSku {
            record: SkuRecord {
                encryption_at_host_supported: eah,
                trusted_launch_disabled: tl_disabled,
                ..embedded_sku(name).unwrap().clone()
            },
            zones: vec!["1".into()],
        };
        *catalog.live.write().unwrap() = Some(Arc::new(vec![
            live("Standard_D4s_v5", Some(true), Some(false)),
            live("Standard_E4s_v5", Some(false), Some(false)),
            live("Standard_F4s_v2", Some(true), Some(true)),
            live("Standard_D2_v2", Some(true), None),
        ]));
        catalog.live_version.fetch_add(1, Ordering::AcqRel);
        assert_eq!(names(&class("{}")).len(), 4);
        let mut got = names(&eah);
        got.sort();
        assert_eq!(got, ["Standard_D2_v2", "Standard_D4s_v5", "Standard_F4s_v2"]);
        let mut got = names(&tl);
        got.sort();
        assert_eq!(got, ["Standard_D4s_v5", "Standard_E4s_v5"], "F4s_v2 disables TL, D2_v2 is gen1");
        assert_eq!(names(&both), ["Standard_D4s_v5"]);
    }

    #[test]
    fn sizes_without_an_image_of_the_class_are_left_out() {
        use crate::apis::aksnodeclass::AKSNodeClassStatus;
        use crate::cloud::azure::imagefamily::{distro_definitions, node_image, Distro};
        let catalog = catalog();
        let mut class: AKSNodeClass = serde_yaml::from_str(
            "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c}\nspec: {}\n",
        )
        .unwrap();
        let has = |types: &[InstanceType], name: &str| types.iter().any(|t| t.name == name);
        let all = catalog.types_for(Some(&class));
        assert!(has(&all, "Standard_D2ps_v5") && has(&all, "Standard_D2_v2"), "no images: no filter");
        let [gen2, gen1, arm64] = distro_definitions(Distro::Ubuntu2404);
        class.status = Some(AKSNodeClassStatus {
            images: vec![node_image(&gen2, "1"), node_image(&gen1, "1"), node_image(&arm64, "1")],
            ..Default::default()
        });
        assert_eq!(catalog.types_for(Some(&class)).len(), all.len(), "every size boots one of the three");
        class.status =
            Some(AKSNodeClassStatus { images: vec![node_image(&gen2, "2")], ..Default::default() });
        let gen2_amd64 = catalog.types_for(Some(&class));
        assert!(has(&gen2_amd64, "Standard_D2s_v5"));
        assert!(!has(&gen2_amd64, "Standard_D2ps_v5"), "arm64 has no image");
        assert!(!has(&gen2_amd64, "Standard_D2_v2"), "gen1-only has no image");
    }
}
