//! The Azure Retail Prices API: a client that pages through a region's VM rows, and the loop that
//! refreshes the catalog's prices in effect ([`PricingProvider`]) with them.
//!
//! The client hands the rows to `catalog::pricing`, which decides what they mean. A refresh is
//! all-or-nothing: if any page fails, the previous table stays in place, because a partial table would
//! silently drop sizes from cost ranking.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use url::Url;

use crate::catalog::pricing::{PriceTable, RetailPriceItem};
use crate::catalog::retail::{PricingProvider, RefreshSummary};

/// API version upstream uses (provider pricing client pricingapi.go).
pub const RETAIL_API_VERSION: &str = "2023-01-01-preview";
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
    /// `base_url` is the API endpoint without a query (default
    /// [`crate::catalog::retail::DEFAULT_RETAIL_PRICES_URL`]).
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

    /// Fetches live prices for `provider`'s region and, only if every page succeeded, installs them over
    /// its static table.
    pub async fn refresh(&self, provider: &PricingProvider) -> Result<RefreshSummary, RetailError> {
        let live = self.fetch_price_table(&provider.region()).await?;
        Ok(provider.install(&live, wall_time()))
    }
}

/// Refreshes now and then every `interval` until the task is aborted; failures are logged and the
/// previous prices kept (as upstream's pricing provider does).
pub fn spawn_refresh_loop(
    provider: &PricingProvider,
    client: RetailPricesClient,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    let provider = provider.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let region = provider.region();
            let (was, age) = provider.age(wall_time());
            match client.refresh(&provider).await {
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

/// Wall time since the Unix epoch, the clock price ages are measured on.
pub fn wall_time() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}
