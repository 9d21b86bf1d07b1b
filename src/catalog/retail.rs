//! The I/O half of pricing: a client for the public Azure Retail Prices API and the provider that keeps
//! the current price table fresh.
//!
//! The client pages through `NextPageLink` and hands the rows to `pricing.rs`, which decides what they
//! mean. A refresh is all-or-nothing: if any page fails, the previous table stays in place, because a
//! partial table would silently drop sizes from cost ranking.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use url::Url;

use super::pricing::{PriceTable, RetailPriceItem};

/// Public endpoint of the Azure Retail Prices API (no authentication).
pub const DEFAULT_RETAIL_PRICES_URL: &str = "https://prices.azure.com/api/retail/prices";
/// API version upstream uses (provider pricing client pricingapi.go).
pub const RETAIL_API_VERSION: &str = "2023-01-01-preview";
/// Upstream refreshes prices every 12 hours after startup.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);
/// A region has a few thousand VM rows at 1,000 per page; this bound only stops a server that keeps
/// returning a next link forever.
const MAX_PAGES: usize = 1000;

/// Errors of the Retail Prices client.
#[derive(Debug, thiserror::Error)]
pub enum RetailError {
    #[error("invalid retail prices URL {url:?}: {source}")]
    InvalidUrl { url: String, source: url::ParseError },
    #[error("retail prices request to {url} failed: {source}")]
    Transport { url: String, source: reqwest::Error },
    #[error("retail prices request to {url} returned HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("retail prices page {url} is not valid JSON: {source}")]
    Decode { url: String, source: serde_json::Error },
    #[error("retail prices paging did not end after {MAX_PAGES} pages")]
    TooManyPages,
    #[error("retail prices for region {region:?} returned no usable Linux VM prices")]
    Empty { region: String },
}

impl RetailError {
    /// Static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidUrl { .. } => "InvalidURL",
            Self::Transport { .. } => "Transport",
            Self::Status { .. } => "HTTPStatus",
            Self::Decode { .. } => "Decode",
            Self::TooManyPages => "TooManyPages",
            Self::Empty { .. } => "Empty",
        }
    }
}

/// One page of the API response.
#[derive(Debug, Deserialize)]
struct RetailPage {
    #[serde(rename = "Items", default)]
    items: Vec<RetailPriceItem>,
    #[serde(rename = "NextPageLink", default)]
    next_page_link: Option<String>,
}

/// Client for the Retail Prices API.
#[derive(Debug, Clone)]
pub struct RetailPricesClient {
    http: reqwest::Client,
    base_url: Url,
}

impl RetailPricesClient {
    /// `base_url` is the API endpoint without a query (default [`DEFAULT_RETAIL_PRICES_URL`]).
    pub fn new(http: reqwest::Client, base_url: &str) -> Result<Self, RetailError> {
        let base_url = Url::parse(base_url)
            .map_err(|source| RetailError::InvalidUrl { url: base_url.to_string(), source })?;
        Ok(RetailPricesClient { http, base_url })
    }

    /// The first-page URL for `region`.
    pub fn first_page_url(&self, region: &str) -> Url {
        let filter = format!(
            "priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' \
             and serviceName eq 'Virtual Machines' and armRegionName eq '{region}'"
        );
        let mut url = self.base_url.clone();
        url.query_pairs_mut().append_pair("api-version", RETAIL_API_VERSION).append_pair("$filter", &filter);
        url
    }

    /// All rows for `region`, following `NextPageLink` until it is null. Fails if any page fails.
    pub async fn fetch_items(&self, region: &str) -> Result<Vec<RetailPriceItem>, RetailError> {
        let mut items = Vec::new();
        let mut next = Some(self.first_page_url(region).to_string());
        for _ in 0..MAX_PAGES {
            let Some(url) = next.take() else {
                return Ok(items);
            };
            let page = self.fetch_page(&url).await?;
            items.extend(page.items);
            next = page.next_page_link.filter(|link| !link.is_empty());
        }
        match next {
            None => Ok(items),
            Some(_) => Err(RetailError::TooManyPages),
        }
    }

    /// The live price table for `region`; an empty result is an error so it cannot replace real prices.
    pub async fn fetch_price_table(&self, region: &str) -> Result<PriceTable, RetailError> {
        let items = self.fetch_items(region).await?;
        let table = PriceTable::from_retail_items(region, &items);
        if table.is_empty() {
            return Err(RetailError::Empty { region: region.to_string() });
        }
        Ok(table)
    }

    async fn fetch_page(&self, url: &str) -> Result<RetailPage, RetailError> {
        let transport = |source| RetailError::Transport { url: url.to_string(), source };
        let response = self.http.get(url).send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            return Err(RetailError::Status { url: url.to_string(), status: status.as_u16() });
        }
        let body = response.bytes().await.map_err(transport)?;
        serde_json::from_slice(&body).map_err(|source| RetailError::Decode { url: url.to_string(), source })
    }
}

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
    pub fn new(region: &str) -> Self {
        Self::with_static(PriceTable::static_or_fallback(region))
    }

    pub fn with_static(static_table: PriceTable) -> Self {
        let static_table = Arc::new(static_table);
        PricingProvider {
            current: Arc::new(RwLock::new(static_table.clone())),
            static_table,
            version: Arc::new(AtomicU64::new(0)),
            updated: Arc::new(RwLock::new(None)),
            started: wall_time(),
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

    /// Fetches live prices and, only if every page succeeded, installs them over the static table.
    pub async fn refresh(&self, client: &RetailPricesClient) -> Result<RefreshSummary, RetailError> {
        let live = client.fetch_price_table(self.static_table.region()).await?;
        Ok(self.install(&live))
    }

    /// Lays `live` over the static table and makes it the prices in effect.
    pub fn install(&self, live: &PriceTable) -> RefreshSummary {
        let spot = live.iter().filter(|(_, p)| p.spot.is_some()).count();
        let merged = Arc::new(self.static_table.merged_with(live));
        let priced = merged.len();
        *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = merged;
        *self.updated.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(wall_time());
        self.version.fetch_add(1, Ordering::AcqRel);
        RefreshSummary { priced, spot }
    }

    /// Refreshes now and then every `interval` until the task is aborted; failures are logged and the
    /// previous prices kept (as upstream's pricing provider does).
    pub fn spawn_refresh_loop(
        &self,
        client: RetailPricesClient,
        interval: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let provider = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let region = provider.region();
                let (was, age) = provider.age(wall_time());
                match provider.refresh(&client).await {
                    Ok(RefreshSummary { priced, spot }) => tracing::info!(
                        %region,
                        priced,
                        spot,
                        replaced = was.as_str(),
                        replaced_age_s = age.as_secs(),
                        next_in_s = interval.as_secs(),
                        "refreshed VM prices from the Retail Prices API"
                    ),
                    Err(error) => tracing::warn!(
                        %region,
                        category = error.category(),
                        %error,
                        prices = was.as_str(),
                        age_s = age.as_secs(),
                        "VM price refresh failed; keeping the prices in effect"
                    ),
                }
            }
        })
    }
}

/// Wall time since the Unix epoch, the clock price ages are measured on.
fn wall_time() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}
