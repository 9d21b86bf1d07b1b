//! The prices in effect for one region: the embedded static table until live prices arrive, then the
//! live Retail Prices rows laid over it, with how old they are. Pure state: fetching the rows and the
//! refresh loop are the Azure provider's (`cloud::azure::retail`), and every time is passed in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::pricing::PriceTable;

/// Public endpoint of the Azure Retail Prices API (no authentication).
pub const DEFAULT_RETAIL_PRICES_URL: &str = "https://prices.azure.com/api/retail/prices";
/// Upstream refreshes prices every 12 hours after startup.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);

/// Holds the current price table of one region: the static fallback until a refresh succeeds, then live
/// prices laid over it. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct PricingProvider {
    static_table: Arc<PriceTable>,
    current: Arc<RwLock<Arc<PriceTable>>>,
    /// Bumped by every successful refresh, so whoever caches what the prices decide knows to recompute.
    version: Arc<AtomicU64>,
    /// Wall time (since the Unix epoch) of the last successful refresh; None while static.
    updated: Arc<RwLock<Option<Duration>>>,
    /// Wall time the static table came into effect.
    started: Duration,
}

/// Where the prices in effect come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The embedded table: on-demand only, spot priced as on-demand (upstream's start-up behaviour).
    Static,
    /// The Retail Prices API, laid over the embedded table.
    Live,
}

impl PriceSource {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PriceSource::Static => "static",
            PriceSource::Live => "live",
        }
    }
}

/// What a successful refresh installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshSummary {
    /// Sizes with a price now in effect (live or static).
    pub priced: usize,
    /// Sizes with a live spot price.
    pub spot: usize,
}

impl PricingProvider {
    /// Starts from the embedded static prices of `region` (eastus's for a region without its own, as
    /// upstream).
    /// `now` is the wall time (since the Unix epoch) the static prices come into effect.
    pub fn new(region: &str, now: Duration) -> Self {
        Self::with_static(PriceTable::static_or_fallback(region), now)
    }

    pub fn with_static(static_table: PriceTable, now: Duration) -> Self {
        let static_table = Arc::new(static_table);
        PricingProvider {
            current: Arc::new(RwLock::new(static_table.clone())),
            static_table,
            version: Arc::new(AtomicU64::new(0)),
            updated: Arc::new(RwLock::new(None)),
            started: now,
        }
    }

    pub fn region(&self) -> String {
        self.static_table.region().to_string()
    }

    /// A snapshot of the current table.
    pub fn current(&self) -> Arc<PriceTable> {
        self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Changes whenever [`Self::current`] does.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// When live prices were last installed (wall time since the Unix epoch); None while only the static
    /// table is in effect.
    pub fn updated(&self) -> Option<Duration> {
        *self.updated.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where the prices in effect come from and how old they are at `now` (wall time since the Unix
    /// epoch): since the last live update, or, while static, since the static table came into effect
    /// (how long live prices have been missing).
    pub fn age(&self, now: Duration) -> (PriceSource, Duration) {
        match self.updated() {
            Some(at) => (PriceSource::Live, now.saturating_sub(at)),
            None => (PriceSource::Static, now.saturating_sub(self.started)),
        }
    }

    /// Lays `live` over the static table and makes it the prices in effect, as of `now` (wall time since
    /// the Unix epoch).
    pub fn install(&self, live: &PriceTable, now: Duration) -> RefreshSummary {
        let spot = live.iter().filter(|(_, p)| p.spot.is_some()).count();
        let merged = Arc::new(self.static_table.merged_with(live));
        let priced = merged.len();
        *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = merged;
        *self.updated.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(now);
        self.version.fetch_add(1, Ordering::AcqRel);
        RefreshSummary { priced, spot }
    }
}
