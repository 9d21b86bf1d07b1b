//! Building the ARM clients and the credential from settings.
//!
//! Owns [`ArmSettings`] (endpoint, authority host, identity, retry budget) and [`ArmClients`]: the
//! azure_mgmt_compute / azure_mgmt_network 0.21 clients plus the calls made outside them: a GET for
//! operation-status URLs, which the SDK cannot poll for VMs (its VM create LRO ignores
//! `Azure-AsyncOperation`), a PATCH for bodies its models drop, and listings read one item at a time
//! (their pages retried on the SDK's schedule, [`RetrySettings::wait_before_retry`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_core::{ExponentialRetryOptions, HttpClient, RetryOptions, TransportOptions, Url};
use azure_identity::ClientSecretCredential;
use azure_mgmt_compute::package_2024_07_01 as compute;
use serde_json::Value;

use super::bootstrap::Secret;
use super::credential::{
    CredentialHealth, FederatedTokenFileCredential, ManagedIdentityCredential, WatchedCredential,
};
use super::errors::ArmFailure;

/// Public cloud endpoints (ARM_CLOUD=AzurePublicCloud upstream).
pub const PUBLIC_ARM_ENDPOINT: &str = "https://management.azure.com";
pub const PUBLIC_AUTHORITY_HOST: &str = "https://login.microsoftonline.com";

/// How the operator authenticates to ARM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `AZURE_CLIENT_SECRET`.
    ClientSecret(Secret),
    /// `AZURE_FEDERATED_TOKEN_FILE` (workload identity): a projected service-account token.
    FederatedTokenFile(PathBuf),
    /// Neither: the managed identity of the VM, from its instance metadata service at `endpoint`;
    /// `client_id` (`AZURE_CLIENT_ID`) picks a user-assigned identity.
    ManagedIdentity { client_id: Option<String>, endpoint: Url },
}

/// Retry budget of every ARM request (the SDK retries 408/429/500/502/503/504, honouring Retry-After).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
    pub max_total_elapsed: Duration,
}

impl Default for RetrySettings {
    /// azure_core 0.21's schedule (it still waits at least Retry-After on 429 and 503), capped
    /// shorter than its 30 s delay / 60 s total: a call that stays throttled should come back to the
    /// controller, which requeues the NodeClaim with its own backoff, instead of stalling a launch for
    /// a minute inside the SDK.
    fn default() -> Self {
        let d = ExponentialRetryOptions::default();
        RetrySettings {
            max_retries: d.max_retries,
            initial_delay: d.initial_delay,
            max_delay: MAX_RETRY_DELAY,
            max_total_elapsed: MAX_RETRY_ELAPSED,
        }
    }
}

/// Longest wait between two SDK retries of one ARM call.
const MAX_RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(4);
/// Longest time the SDK keeps retrying one ARM call.
const MAX_RETRY_ELAPSED: std::time::Duration = std::time::Duration::from_secs(20);

impl RetrySettings {
    /// How long to wait before retrying a call that failed with `status` (0: no answer) after
    /// `retries` retries and `elapsed` since its first attempt, or `None` to give up: the SDK's
    /// schedule for the calls made outside it. It retries what azure_core's policy retries (no
    /// answer, 408, 429, 500, 502, 503, 504), waits `initial_delay` doubled per retry up to
    /// `max_delay` but never less than ARM's `advised` wait, and stops after `max_retries` or when
    /// the wait would end past `max_total_elapsed`.
    pub fn wait_before_retry(
        &self,
        status: u16,
        retries: u32,
        elapsed: Duration,
        advised: Option<Duration>,
    ) -> Option<Duration> {
        let retryable = matches!(status, 0 | 408 | 429 | 500 | 502 | 503 | 504);
        if !retryable || retries >= self.max_retries {
            return None;
        }
        let backoff = self.initial_delay.saturating_mul(1 << retries.min(16)).min(self.max_delay);
        let wait = advised.map_or(backoff, |advice| advice.max(backoff));
        (elapsed + wait <= self.max_total_elapsed).then_some(wait)
    }

    fn to_options(self) -> RetryOptions {
        if self.max_retries == 0 {
            return RetryOptions::none();
        }
        RetryOptions::exponential(
            ExponentialRetryOptions::default()
                .max_retries(self.max_retries)
                .initial_delay(self.initial_delay)
                .max_delay(self.max_delay)
                .max_total_elapsed(self.max_total_elapsed),
        )
    }
}

/// Time limits of each HTTP request to ARM and Entra ID. A request that outlives them fails as an I/O
/// error, which the SDK's retry policy retries within [`RetrySettings`]; so one hung connection costs a
/// call at most `request × (max_retries + 1)` plus the backoff, never the launch behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// Establishing the TCP and TLS connection.
    pub connect: Duration,
    /// The whole request, from sending to the last byte of the answer.
    pub request: Duration,
}

impl Default for HttpTimeouts {
    /// ARM answers a request in seconds (long work is an asynchronous operation that is polled), so a
    /// request still open after half a minute is taken for hung.
    fn default() -> Self {
        HttpTimeouts { connect: Duration::from_secs(10), request: Duration::from_secs(30) }
    }
}

/// An HTTP client with `timeouts`; `pooled` keeps idle connections for reuse. The SDK's clients are
/// built unpooled, as azure_core builds its own (hyperium/hyper#2312 makes pooled ones hang).
pub fn http_client(timeouts: HttpTimeouts, pooled: bool) -> Result<reqwest::Client, ClientError> {
    let mut builder = reqwest::Client::builder().connect_timeout(timeouts.connect).timeout(timeouts.request);
    if !pooled {
        builder = builder.pool_max_idle_per_host(0);
    }
    builder.build().map_err(ClientError::Http)
}

/// Where ARM is and who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmSettings {
    pub arm_endpoint: Url,
    pub authority_host: Url,
    pub subscription_id: String,
    pub tenant_id: String,
    pub client_id: String,
    pub credential: CredentialSource,
    pub retry: RetrySettings,
    pub timeouts: HttpTimeouts,
}

/// Errors of client construction.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading the federated token file {path}: {source}")]
    TokenFile { path: PathBuf, source: std::io::Error },
    #[error("building an ARM client: {0}")]
    Build(#[from] azure_core::Error),
    #[error("the ARM endpoint cannot be a token scope: {0}")]
    Endpoint(#[from] url::ParseError),
    #[error("building the HTTP client: {0}")]
    Http(reqwest::Error),
}

impl ClientError {
    pub fn category(&self) -> &'static str {
        match self {
            ClientError::TokenFile { .. } => "CredentialUnavailable",
            ClientError::Build(_) | ClientError::Endpoint(_) | ClientError::Http(_) => "ClientConfiguration",
        }
    }
}

/// The ARM clients the provider uses.
#[derive(Clone)]
pub struct ArmClients {
    pub compute: compute::Client,
    pub network: azure_mgmt_network::Client,
    pub subscription_id: String,
    credential: Arc<dyn TokenCredential>,
    credential_health: Arc<CredentialHealth>,
    scope: String,
    http: reqwest::Client,
    endpoint: url::Url,
    /// The retry budget of the calls made outside the SDK that are safe to repeat (listing pages).
    retry: RetrySettings,
}

impl std::fmt::Debug for ArmClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClients").field("subscription_id", &self.subscription_id).finish_non_exhaustive()
    }
}

impl ArmClients {
    pub fn new(settings: &ArmSettings) -> Result<ArmClients, ClientError> {
        let http: Arc<dyn HttpClient> = Arc::new(http_client(settings.timeouts, false)?);
        let credential: Arc<dyn TokenCredential> = match &settings.credential {
            CredentialSource::ClientSecret(secret) => Arc::new(ClientSecretCredential::new(
                http,
                settings.authority_host.clone(),
                settings.tenant_id.clone(),
                settings.client_id.clone(),
                secret.expose().to_string(),
            )),
            // Read at start so a missing file stops start-up with a message, then again for every
            // token exchange: the kubelet rotates it.
            CredentialSource::FederatedTokenFile(path) => {
                std::fs::read_to_string(path)
                    .map_err(|source| ClientError::TokenFile { path: path.clone(), source })?;
                Arc::new(FederatedTokenFileCredential::new(
                    http,
                    settings.authority_host.clone(),
                    settings.tenant_id.clone(),
                    settings.client_id.clone(),
                    path.clone(),
                ))
            }
            CredentialSource::ManagedIdentity { client_id, endpoint } => {
                Arc::new(ManagedIdentityCredential::new(
                    http_client(settings.timeouts, true)?,
                    endpoint.clone(),
                    client_id.clone(),
                ))
            }
        };
        Self::with_credential(settings, credential)
    }

    /// Whether the credential gets tokens (every client shares it).
    pub fn credential_health(&self) -> Arc<CredentialHealth> {
        self.credential_health.clone()
    }

    /// Clients over an existing credential (e.g. a managed identity built elsewhere).
    pub fn with_credential(
        settings: &ArmSettings,
        credential: Arc<dyn TokenCredential>,
    ) -> Result<ArmClients, ClientError> {
        let credential_health = Arc::new(CredentialHealth::default());
        let credential: Arc<dyn TokenCredential> =
            Arc::new(WatchedCredential::new(credential, credential_health.clone()));
        let retry = settings.retry.to_options();
        let sdk_http: Arc<dyn HttpClient> = Arc::new(http_client(settings.timeouts, false)?);
        let compute = compute::Client::builder(credential.clone())
            .endpoint(settings.arm_endpoint.clone())
            .retry(retry.clone())
            .transport(TransportOptions::new(sdk_http.clone()))
            .build()?;
        let network = azure_mgmt_network::Client::builder(credential.clone())
            .endpoint(settings.arm_endpoint.clone())
            .retry(retry)
            .transport(TransportOptions::new(sdk_http))
            .build()?;
        let scope = settings.arm_endpoint.join(azure_core::auth::DEFAULT_SCOPE_SUFFIX)?.to_string();
        Ok(ArmClients {
            compute,
            network,
            subscription_id: settings.subscription_id.clone(),
            credential,
            credential_health,
            scope,
            endpoint: settings.arm_endpoint.clone(),
            http: http_client(settings.timeouts, true)?,
            retry: settings.retry,
        })
    }

    /// PATCHes `body` to the ARM resource at `path` (`/subscriptions/...`) with `api_version`. For
    /// bodies the SDK's models cannot carry: its `UserAssignedIdentities` has no fields, so identities
    /// would be dropped on the way.
    pub async fn patch_json(&self, path: &str, api_version: &str, body: &Value) -> Result<Value, ArmFailure> {
        let url = self.url(path, api_version)?;
        read_json(self.send(self.http.patch(url.as_str()).json(body)).await?).await
    }

    /// Lists the ARM collection at `path` (`/subscriptions/...`) with `api_version`, following each
    /// page's `nextLink`, and hands every item to `each` as its page is read ([`super::list_page`]):
    /// the listing holds one page's text and one item at a time, not a typed model of every item.
    pub async fn list_each(
        &self,
        path: &str,
        api_version: &str,
        each: &mut (dyn FnMut(Value) + Send),
    ) -> Result<(), ArmFailure> {
        let mut next = Some(self.url(path, api_version)?.to_string());
        while let Some(url) = next.take() {
            let page = self.get_page(&url).await?;
            next = super::list_page::each_item(&page, each).map_err(|e| ArmFailure {
                status: 200,
                code: "InvalidResponse".into(),
                message: format!("reading a page of {path}: {e}"),
            })?;
        }
        Ok(())
    }

    /// The text of one listing page, its GET retried as the SDK retries its own calls
    /// ([`RetrySettings::wait_before_retry`]): a page is safe to ask for again.
    async fn get_page(&self, url: &str) -> Result<bytes::Bytes, ArmFailure> {
        let started = tokio::time::Instant::now();
        let mut retries = 0;
        loop {
            let (failure, advised) = match self.get_page_once(url).await {
                Ok(page) => return Ok(page),
                Err(failed) => failed,
            };
            let wait = self
                .retry
                .wait_before_retry(failure.status, retries, started.elapsed(), advised)
                .ok_or(failure)?;
            tokio::time::sleep(wait).await;
            retries += 1;
        }
    }

    /// One GET of a listing page: its text, or the failure with ARM's advice on when to ask again.
    async fn get_page_once(&self, url: &str) -> Result<bytes::Bytes, (ArmFailure, Option<Duration>)> {
        let response = self.send(self.http.get(url)).await.map_err(|e| (e, None))?;
        let status = response.status().as_u16();
        let headers = response.headers();
        let advised = super::lro::retry_after(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        let page = response.bytes().await.map_err(|e| (not_sent(e), advised))?;
        if !(200..300).contains(&status) {
            return Err((failure(status, &serde_json::from_slice(&page).unwrap_or(Value::Null)), advised));
        }
        Ok(page)
    }

    /// Sends `request` with a bearer token for ARM: the one place the raw (non-SDK) calls authenticate.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, ArmFailure> {
        let token = self.credential.get_token(&[&self.scope]).await.map_err(|e| ArmFailure::from_sdk(&e))?;
        request.bearer_auth(token.token.secret()).send().await.map_err(not_sent)
    }

    /// The URL of the ARM resource at `path` with `api_version`.
    fn url(&self, path: &str, api_version: &str) -> Result<Url, ArmFailure> {
        let mut url = self.endpoint.join(path.trim_start_matches('/')).map_err(|e| ArmFailure {
            status: 0,
            code: "InvalidUrl".into(),
            message: e.to_string(),
        })?;
        url.query_pairs_mut().append_pair("api-version", api_version);
        Ok(url)
    }

    /// GETs an operation-status (or `Location`) URL ARM handed out, with a bearer token; also returns
    /// ARM's advice on when to ask again (`lro::retry_after`).
    pub async fn get_json_polled(&self, url: &str) -> Result<(Value, Option<Duration>), ArmFailure> {
        let response = self.send(self.http.get(url)).await?;
        let headers = response.headers();
        let advice = super::lro::retry_after(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        Ok((read_json(response).await?, advice))
    }
}

/// The JSON body of a 2xx answer, or the ARM error it carries.
async fn read_json(response: reqwest::Response) -> Result<Value, ArmFailure> {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        return Ok(body);
    }
    Err(failure(status, &body))
}

/// The ARM error a non-2xx answer's `body` carries.
fn failure(status: u16, body: &Value) -> ArmFailure {
    ArmFailure {
        status,
        code: body.pointer("/error/code").and_then(Value::as_str).unwrap_or_default().to_string(),
        message: body.pointer("/error/message").and_then(Value::as_str).unwrap_or_default().to_string(),
    }
}

/// A request that got no answer from ARM (connection, timeout, a body cut short).
fn not_sent(e: reqwest::Error) -> ArmFailure {
    ArmFailure { status: 0, code: String::new(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: RetrySettings = RetrySettings {
        max_retries: 4,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(500),
        max_total_elapsed: Duration::from_secs(2),
    };

    #[test]
    fn what_the_sdk_retries_is_retried_with_a_doubling_wait_up_to_its_cap() {
        let wait = |status, retries| SETTINGS.wait_before_retry(status, retries, Duration::ZERO, None);
        for status in [0, 408, 429, 500, 502, 503, 504] {
            assert_eq!(wait(status, 0), Some(Duration::from_millis(100)), "{status}");
        }
        assert_eq!(wait(503, 1), Some(Duration::from_millis(200)));
        assert_eq!(wait(503, 2), Some(Duration::from_millis(400)));
        assert_eq!(wait(503, 3), Some(Duration::from_millis(500)), "capped at max_delay");
        assert_eq!(wait(503, 4), None, "max_retries spent");
        for status in [400, 401, 403, 404, 409, 501] {
            assert_eq!(wait(status, 0), None, "{status} is an answer, not a hiccup");
        }
    }

    #[test]
    fn arm_advice_lengthens_the_wait_and_the_budget_ends_it() {
        let advised = Some(Duration::from_secs(1));
        assert_eq!(SETTINGS.wait_before_retry(429, 0, Duration::ZERO, advised), Some(Duration::from_secs(1)));
        let short = Some(Duration::from_millis(10));
        assert_eq!(
            SETTINGS.wait_before_retry(429, 1, Duration::ZERO, short),
            Some(Duration::from_millis(200))
        );
        let spent = Duration::from_millis(1_500);
        assert_eq!(
            SETTINGS.wait_before_retry(429, 0, spent, advised),
            None,
            "would end past max_total_elapsed"
        );
        assert_eq!(SETTINGS.wait_before_retry(429, 0, spent, None), Some(Duration::from_millis(100)));
        let none = RetrySettings { max_retries: 0, ..SETTINGS };
        assert_eq!(none.wait_before_retry(500, 0, Duration::ZERO, None), None);
    }
}
