//! Workload identity that keeps working when the kubelet rotates the service-account token.
//!
//! The projected token in `AZURE_FEDERATED_TOKEN_FILE` is short-lived (AKS workload identity: one
//! hour) and the kubelet rewrites the file before it expires. azure_identity 0.21's
//! `WorkloadIdentityCredential` keeps the assertion it was built with, so once its first access token
//! expires every exchange presents an expired assertion and every ARM call fails
//! (Azure/azure-sdk-for-rust#1739). [`FederatedTokenFileCredential`] reads the file each time it needs a
//! new access token and exchanges what it read, as azidentity's `WorkloadIdentityCredential` does in Go.
//!
//! Access tokens are cached per scope and bought again [`REFRESH_BEFORE`] their expiry (or halfway
//! through their life when that is shorter), so a rotated file is picked up at the next refresh.
//!
//! [`ManagedIdentityCredential`] takes the tokens of the VM's managed identity from the instance
//! metadata service instead (azure_identity 0.21's only serves the system-assigned identity).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use azure_core::auth::{AccessToken, TokenCredential};
use azure_core::error::{Error, ErrorKind};
use azure_core::{HttpClient, Url};
use azure_identity::WorkloadIdentityCredential;
use time::OffsetDateTime;
use tokio::sync::Mutex;

/// How long before its expiry an access token is bought again (MSAL's and azidentity's margin).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// A workload-identity credential over a token file that is re-read for every exchange.
pub struct FederatedTokenFileCredential {
    http: Arc<dyn HttpClient>,
    authority_host: Url,
    tenant_id: String,
    client_id: String,
    path: PathBuf,
    /// By scopes: the token and when it should be bought again.
    cache: TokenCache,
}

impl fmt::Debug for FederatedTokenFileCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FederatedTokenFileCredential")
            .field("tenant_id", &self.tenant_id)
            .field("client_id", &self.client_id)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FederatedTokenFileCredential {
    pub fn new(
        http: Arc<dyn HttpClient>,
        authority_host: Url,
        tenant_id: String,
        client_id: String,
        path: PathBuf,
    ) -> Self {
        FederatedTokenFileCredential {
            http,
            authority_host,
            tenant_id,
            client_id,
            path,
            cache: TokenCache::default(),
        }
    }

    /// The service-account token as the file holds it now.
    fn read_assertion(&self) -> azure_core::Result<String> {
        let token = std::fs::read_to_string(&self.path).map_err(|e| {
            Error::full(
                ErrorKind::Credential,
                e,
                format!("reading the federated token file {}", self.path.display()),
            )
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(Error::message(
                ErrorKind::Credential,
                format!("the federated token file {} is empty", self.path.display()),
            ));
        }
        Ok(token.to_string())
    }
}

/// Access tokens by scopes, each with when to buy it again ([`refresh_at`]).
#[derive(Default)]
struct TokenCache {
    tokens: Mutex<BTreeMap<Vec<String>, (AccessToken, OffsetDateTime)>>,
}

impl TokenCache {
    /// The cached token for `scopes` while it is fresh, else the one `buy` gets, cached. One purchase
    /// at a time: concurrent callers wait for it instead of each buying a token.
    async fn get_or_buy<F, Fut>(&self, scopes: &[&str], buy: F) -> azure_core::Result<AccessToken>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = azure_core::Result<AccessToken>>,
    {
        let key: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        let mut tokens = self.tokens.lock().await;
        let now = OffsetDateTime::now_utc();
        if let Some((token, refresh)) = tokens.get(&key) {
            if now < *refresh {
                return Ok(token.clone());
            }
        }
        let token = buy().await?;
        tokens.insert(key, (token.clone(), refresh_at(now, token.expires_on)));
        Ok(token)
    }

    async fn clear(&self) {
        self.tokens.lock().await.clear();
    }
}

/// When a token that expires at `expires_on`, bought at `now`, should be bought again.
fn refresh_at(now: OffsetDateTime, expires_on: OffsetDateTime) -> OffsetDateTime {
    let life = (expires_on - now).max(time::Duration::ZERO);
    let margin = time::Duration::try_from(REFRESH_BEFORE).unwrap_or(time::Duration::ZERO).min(life / 2);
    expires_on - margin
}

#[async_trait::async_trait]
impl TokenCredential for FederatedTokenFileCredential {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        self.cache
            .get_or_buy(scopes, || async {
                let exchange = WorkloadIdentityCredential::new(
                    self.http.clone(),
                    self.authority_host.clone(),
                    self.tenant_id.clone(),
                    self.client_id.clone(),
                    self.read_assertion()?,
                );
                exchange.get_token(scopes).await
            })
            .await
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        self.cache.clear().await;
        Ok(())
    }
}

/// Azure's instance metadata token endpoint, reachable from every VM.
pub const IMDS_TOKEN_ENDPOINT: &str = "http://169.254.169.254/metadata/identity/oauth2/token";
/// The path of the token endpoint under an IMDS host.
const IMDS_TOKEN_PATH: &str = "/metadata/identity/oauth2/token";
/// The IMDS API version of managed-identity tokens.
const IMDS_API_VERSION: &str = "2018-02-01";

/// The token endpoint of the instance metadata service at `host` (azidentity's
/// `AZURE_POD_IDENTITY_AUTHORITY_HOST`), else Azure's.
pub fn imds_endpoint(host: Option<&str>) -> Result<Url, url::ParseError> {
    match host.map(str::trim).filter(|h| !h.is_empty()) {
        Some(host) => Url::parse(&format!("{}{IMDS_TOKEN_PATH}", host.trim_end_matches('/'))),
        None => Url::parse(IMDS_TOKEN_ENDPOINT),
    }
}

/// The managed identity of the VM the controller runs on, from the instance metadata service: the
/// VM's own (system-assigned), or the user-assigned one `client_id` names (on AKS, for example, the
/// kubelet identity). Tokens are cached per scope as [`FederatedTokenFileCredential`]'s are.
pub struct ManagedIdentityCredential {
    http: reqwest::Client,
    endpoint: Url,
    client_id: Option<String>,
    cache: TokenCache,
}

impl fmt::Debug for ManagedIdentityCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedIdentityCredential")
            .field("endpoint", &self.endpoint.as_str())
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// The instance metadata service's answer.
#[derive(serde::Deserialize)]
struct ImdsToken {
    access_token: String,
    /// Unix seconds, as a string.
    expires_on: String,
}

impl ManagedIdentityCredential {
    pub fn new(http: reqwest::Client, endpoint: Url, client_id: Option<String>) -> Self {
        ManagedIdentityCredential { http, endpoint, client_id, cache: TokenCache::default() }
    }

    async fn fetch(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let [scope] = scopes else {
            return Err(Error::message(ErrorKind::Credential, "managed identity takes exactly one scope"));
        };
        let resource = scope.strip_suffix("/.default").unwrap_or(scope);
        let mut url = self.endpoint.clone();
        url.query_pairs_mut().append_pair("api-version", IMDS_API_VERSION).append_pair("resource", resource);
        if let Some(client_id) = &self.client_id {
            url.query_pairs_mut().append_pair("client_id", client_id);
        }
        let failed = |what: String| Error::message(ErrorKind::Credential, what);
        let response = self
            .http
            .get(url.as_str())
            .header("Metadata", "true")
            .send()
            .await
            .map_err(|e| failed(format!("asking the instance metadata service for a token: {e}")))?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let identity = self.client_id.as_deref().unwrap_or("the VM's system-assigned identity");
            return Err(failed(format!(
                "the instance metadata service refused a token for {identity} ({status}): {body}"
            )));
        }
        let token: ImdsToken = serde_json::from_str(&body)
            .map_err(|e| failed(format!("reading the instance metadata service's token: {e}")))?;
        let expires_on = token
            .expires_on
            .parse::<i64>()
            .ok()
            .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
            .ok_or_else(|| failed(format!("the token's expires_on {:?} is not a time", token.expires_on)))?;
        Ok(AccessToken::new(token.access_token, expires_on))
    }
}

#[async_trait::async_trait]
impl TokenCredential for ManagedIdentityCredential {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        self.cache.get_or_buy(scopes, || self.fetch(scopes)).await
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        self.cache.clear().await;
        Ok(())
    }
}

/// Whether the credential gets tokens: since when it has kept failing, and the last failure. Shared
/// by the credential ([`WatchedCredential`]) and what reports on it (metrics, the AKSNodeClass status,
/// `/healthz`).
#[derive(Debug, Default)]
pub struct CredentialHealth {
    failing: std::sync::Mutex<Option<(std::time::Instant, String)>>,
}

impl CredentialHealth {
    fn succeeded(&self) {
        *self.failing.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn failed(&self, why: String, now: std::time::Instant) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let since = failing.as_ref().map_or(now, |(since, _)| *since);
        *failing = Some((since, why));
    }

    /// How long the credential has failed without a success in between, and why, at `now`.
    pub fn failing(&self, now: std::time::Instant) -> Option<(Duration, String)> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        failing.as_ref().map(|(since, why)| (now.saturating_duration_since(*since), why.clone()))
    }
}

/// A credential whose successes and failures are recorded in a [`CredentialHealth`].
#[derive(Debug)]
pub struct WatchedCredential {
    inner: Arc<dyn TokenCredential>,
    health: Arc<CredentialHealth>,
}

impl WatchedCredential {
    pub fn new(inner: Arc<dyn TokenCredential>, health: Arc<CredentialHealth>) -> Self {
        WatchedCredential { inner, health }
    }
}

#[async_trait::async_trait]
impl TokenCredential for WatchedCredential {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let result = self.inner.get_token(scopes).await;
        match &result {
            Ok(_) => self.health.succeeded(),
            Err(error) => self.health.failed(error.to_string(), std::time::Instant::now()),
        }
        result
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        self.inner.clear_cache().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_endpoint_is_azures_unless_a_host_is_given() {
        assert_eq!(imds_endpoint(None).unwrap().as_str(), IMDS_TOKEN_ENDPOINT);
        assert_eq!(imds_endpoint(Some(" ")).unwrap().as_str(), IMDS_TOKEN_ENDPOINT);
        let local = imds_endpoint(Some("http://127.0.0.1:8081/")).unwrap();
        assert_eq!(local.as_str(), "http://127.0.0.1:8081/metadata/identity/oauth2/token");
    }

    #[test]
    fn a_failing_credential_counts_from_its_first_failure_until_a_success() {
        let health = CredentialHealth::default();
        let t0 = std::time::Instant::now();
        health.failed("expired assertion".into(), t0);
        health.failed("expired assertion again".into(), t0 + Duration::from_secs(30));
        let (failing, why) = health.failing(t0 + Duration::from_secs(60)).unwrap();
        assert_eq!((failing, why.as_str()), (Duration::from_secs(60), "expired assertion again"));
        health.succeeded();
        assert!(health.failing(t0 + Duration::from_secs(61)).is_none());
    }

    #[test]
    fn tokens_are_bought_again_five_minutes_early_or_halfway_when_they_live_less() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let hour = now + time::Duration::hours(1);
        assert_eq!(refresh_at(now, hour), hour - time::Duration::minutes(5));
        let short = now + time::Duration::seconds(4);
        assert_eq!(refresh_at(now, short), now + time::Duration::seconds(2));
        assert_eq!(refresh_at(now, now - time::Duration::seconds(1)), now - time::Duration::seconds(1));
    }
}
