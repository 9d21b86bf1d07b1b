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
    cache: Mutex<BTreeMap<Vec<String>, (AccessToken, OffsetDateTime)>>,
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
            cache: Mutex::new(BTreeMap::new()),
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

/// When a token that expires at `expires_on`, bought at `now`, should be bought again.
fn refresh_at(now: OffsetDateTime, expires_on: OffsetDateTime) -> OffsetDateTime {
    let life = (expires_on - now).max(time::Duration::ZERO);
    let margin = time::Duration::try_from(REFRESH_BEFORE).unwrap_or(time::Duration::ZERO).min(life / 2);
    expires_on - margin
}

#[async_trait::async_trait]
impl TokenCredential for FederatedTokenFileCredential {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let key: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        // One exchange at a time: concurrent callers wait for it instead of each buying a token.
        let mut cache = self.cache.lock().await;
        let now = OffsetDateTime::now_utc();
        if let Some((token, refresh)) = cache.get(&key) {
            if now < *refresh {
                return Ok(token.clone());
            }
        }
        let exchange = WorkloadIdentityCredential::new(
            self.http.clone(),
            self.authority_host.clone(),
            self.tenant_id.clone(),
            self.client_id.clone(),
            self.read_assertion()?,
        );
        let token = exchange.get_token(scopes).await?;
        cache.insert(key, (token.clone(), refresh_at(now, token.expires_on)));
        Ok(token)
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        self.cache.lock().await.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
