//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly one
//! provisions, launches, terminates and collects garbage.
//!
//! The protocol is client-go's `leaderelection` with a Lease lock:
//! - A candidate never trusts another replica's clock: it remembers when *it* last saw the Lease record
//!   change (its resourceVersion) and treats the Lease as expired once it has seen no change for
//!   `leaseDurationSeconds` on its own monotonic clock. An empty holder means released: free at once.
//! - Taking or renewing is an update carrying the resourceVersion that was read, so two candidates
//!   racing for an expired Lease cannot both win (the loser gets 409 Conflict).
//! - The leader renews every [`RETRY_PERIOD`]; when it has not renewed successfully for
//!   [`RENEW_DEADLINE`], or it reads another holder, it has lost and must stop acting at once.
//!   `RENEW_DEADLINE < LEASE_DURATION`, so an old leader stops before any candidate may take over.
//! - On shutdown the leader releases the Lease (empty holder) so a standby takes over without waiting.
//!
//! [`decide`] is the pure rule; [`Elector`] does the API calls.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

use super::LeaderElection;

/// How long a Lease stays valid after its last observed change. Shorter than client-go's 15 s default
/// so that a standby takes over within 15 s of the leader dying: it notices the last renewal at most one
/// retry period late and tries again one retry period after expiry, `1 + 12 + 1 = 14 s` at worst.
pub const LEASE_DURATION: Duration = Duration::from_secs(12);
/// The leader stops acting when it could not renew for this long. The margin to [`LEASE_DURATION`],
/// 5 s, is client-go's (15 s − 10 s): an old leader whose renewals stall has aborted its writers, and
/// their last calls have landed, well before any standby can consider the Lease expired.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(7);
/// How often the leader renews and a candidate retries (client-go: 2 s; shorter here so the takeover
/// stays within 15 s with client-go's margin).
pub const RETRY_PERIOD: Duration = Duration::from_secs(1);

/// The part of a Lease the protocol reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Empty when the Lease was released.
    pub holder: String,
    pub lease_duration: Duration,
    pub transitions: i32,
    /// Changes with every write, whoever made it.
    pub resource_version: String,
}

impl Record {
    fn from_lease(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            transitions: spec.lease_transitions.unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// The last record a replica saw and when (its own monotonic clock) it first saw it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub record: Record,
    pub at: Instant,
}

/// What a replica should do with the Lease it just read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: renew.
    Renew,
    /// Free (released or expired): try to take it.
    Take,
    /// Another replica holds a live Lease.
    Wait,
}

/// The rule: `observed` must already reflect the record just read (see [`observe`]).
pub fn decide(identity: &str, observed: &Observed, now: Instant) -> Decision {
    let record = &observed.record;
    if record.holder == identity {
        Decision::Renew
    } else if record.holder.is_empty() || now.saturating_duration_since(observed.at) >= record.lease_duration
    {
        Decision::Take
    } else {
        Decision::Wait
    }
}

/// Updates what a replica has seen: the clock restarts only when the record changed.
pub fn observe(previous: Option<Observed>, record: Record, now: Instant) -> Observed {
    match previous {
        Some(seen) if seen.record == record => seen,
        _ => Observed { record, at: now },
    }
}

/// Why an election call failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("renewing the Lease did not finish before the renew deadline")]
    Timeout,
    #[error("Lease {namespace}/{name}: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl LeaderError {
    /// Whether an API server answered the call (with any status): a refused connection or a timeout
    /// reached none.
    pub fn server_answered(&self) -> bool {
        matches!(self, LeaderError::Kube { source: kube::Error::Api(_), .. })
    }

    pub fn category(&self) -> &'static str {
        match self {
            LeaderError::Timeout => "LeaseTimeout",
            LeaderError::Kube { .. } => "LeaseAPI",
        }
    }
}

/// Told after each Lease call whether an API server answered it.
pub type ApiCallObserver = Box<dyn Fn(bool) + Send + Sync>;

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    lease: LeaderElection,
    identity: String,
    observed: Option<Observed>,
    /// When the leader last wrote its renewal successfully.
    last_renewed: Option<Instant>,
    /// Every replica calls each [`RETRY_PERIOD`], so the calls tell whether the API server is reachable.
    on_api_call: Option<ApiCallObserver>,
}

impl Elector {
    pub fn new(client: kube::Client, lease: LeaderElection, identity: String) -> Elector {
        let api = Api::namespaced(client, &lease.lease_namespace);
        Elector { api, lease, identity, observed: None, last_renewed: None, on_api_call: None }
    }

    /// Tells `observer`, after each Lease call, whether an API server answered it.
    pub fn observe_api_calls(&mut self, observer: ApiCallObserver) {
        self.on_api_call = Some(observer);
    }

    fn report(&self, result: &Result<bool, LeaderError>) {
        if let Some(observer) = &self.on_api_call {
            observer(result.as_ref().map_or_else(LeaderError::server_answered, |_| true));
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn lease_name(&self) -> &str {
        &self.lease.lease_name
    }

    /// Returns once this replica holds the Lease; retries every [`RETRY_PERIOD`] (errors are logged).
    pub async fn acquire(&mut self) {
        loop {
            let result = self.try_acquire_or_renew().await;
            self.report(&result);
            match result {
                Ok(true) => {
                    tracing::info!(identity = %self.identity, lease = %self.lease.lease_name, "became the leader");
                    return;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(category = error.category(), %error, "leader election failed"),
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    /// Renews every [`RETRY_PERIOD`] while this replica leads; returns as soon as it does not, at the
    /// latest [`RENEW_DEADLINE`] after its last successful renewal.
    pub async fn hold(&mut self) {
        loop {
            let left =
                || RENEW_DEADLINE.saturating_sub(self.last_renewed.map_or(RENEW_DEADLINE, |at| at.elapsed()));
            // Wake at the deadline rather than a retry period past it.
            tokio::time::sleep(RETRY_PERIOD.min(left())).await;
            // A hung API call must not keep a leader acting past its deadline.
            let attempt = tokio::time::timeout(left(), self.try_acquire_or_renew()).await;
            let result = attempt.unwrap_or_else(|_| Err(LeaderError::Timeout));
            self.report(&result);
            match result {
                Ok(true) => {}
                Ok(false) => {
                    let holder = self.observed.as_ref().map(|o| o.record.holder.clone()).unwrap_or_default();
                    tracing::warn!(identity = %self.identity, %holder, "lost the leader lease to another replica");
                    return;
                }
                Err(error) => {
                    let since = self.last_renewed.map_or(RENEW_DEADLINE, |at| at.elapsed());
                    if since >= RENEW_DEADLINE {
                        tracing::error!(category = error.category(), %error, "could not renew the leader lease in time; stepping down");
                        return;
                    }
                    tracing::warn!(category = error.category(), %error, "renewing the leader lease failed; retrying");
                }
            }
        }
    }

    /// Gives the Lease up (empty holder) if this replica still holds it, so a standby takes over at once.
    pub async fn release(&mut self) {
        let result = async {
            let mut lease = self.api.get(&self.lease.lease_name).await.map_err(|e| self.error(e))?;
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            self.api
                .replace(&self.lease.lease_name, &PostParams::default(), &lease)
                .await
                .map_err(|e| self.error(e))?;
            Ok::<_, LeaderError>(true)
        }
        .await;
        match result {
            Ok(true) => tracing::info!(identity = %self.identity, "released the leader lease"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(category = error.category(), %error, "releasing the leader lease failed")
            }
        }
        self.last_renewed = None;
    }

    /// One round: read, decide, write. `Ok(true)` when this replica holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let name = self.lease.lease_name.clone();
        let Some(mut lease) = self.api.get_opt(&name).await.map_err(|e| self.error(e))? else {
            return self.create().await;
        };
        let now = Instant::now();
        let observed = observe(self.observed.take(), Record::from_lease(&lease), now);
        let decision = decide(&self.identity, &observed, now);
        let previous = observed.record.clone();
        self.observed = Some(observed);
        if decision == Decision::Wait {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        let stamp = MicroTime(Timestamp::now());
        if decision == Decision::Take {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(stamp.clone());
            spec.lease_transitions = Some(previous.transitions.saturating_add(1));
        }
        spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
        spec.renew_time = Some(stamp);
        // The resourceVersion read above makes this a compare-and-swap.
        match self.api.replace(&name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observed = Some(Observed { record: Record::from_lease(&written), at: Instant::now() });
                self.last_renewed = Some(now);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Creates the Lease held by this replica; `Ok(false)` when another replica created it first.
    async fn create(&mut self) -> Result<bool, LeaderError> {
        let stamp = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease.lease_name.clone()),
                namespace: Some(self.lease.lease_namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
                acquire_time: Some(stamp.clone()),
                renew_time: Some(stamp),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => {
                let now = Instant::now();
                self.observed = Some(Observed { record: Record::from_lease(&written), at: now });
                self.last_renewed = Some(now);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    fn error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Kube {
            namespace: self.lease.lease_namespace.clone(),
            name: self.lease.lease_name.clone(),
            source,
        }
    }
}

/// `<host>_<random>`: the host (the pod name in a cluster) says which replica leads; the random part
/// keeps a restarted process from mistaking its predecessor's Lease for its own.
pub fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "karpenter-azure".to_string());
    // RandomState is seeded randomly per process: a unique suffix without another dependency.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{host}_{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, version: &str) -> Record {
        Record {
            holder: holder.to_string(),
            lease_duration: LEASE_DURATION,
            transitions: 0,
            resource_version: version.to_string(),
        }
    }

    #[test]
    fn the_holder_renews_and_others_wait_while_the_lease_is_live() {
        let t0 = Instant::now();
        let seen = observe(None, record("a", "1"), t0);
        assert_eq!(decide("a", &seen, t0), Decision::Renew);
        assert_eq!(decide("b", &seen, t0 + LEASE_DURATION - Duration::from_millis(1)), Decision::Wait);
    }

    #[test]
    fn a_lease_expires_only_after_a_full_duration_without_change_on_the_observers_clock() {
        let t0 = Instant::now();
        let seen = observe(None, record("a", "1"), t0);
        // The leader renews (new resourceVersion) 9 s later: the clock restarts.
        let renewed_at = t0 + Duration::from_secs(9);
        let renewed = observe(Some(seen), record("a", "2"), renewed_at);
        assert_eq!(decide("b", &renewed, t0 + LEASE_DURATION + Duration::from_secs(2)), Decision::Wait);
        // No change seen again: the observation time stays, and expiry follows one duration later.
        let same = observe(Some(renewed), record("a", "2"), renewed_at + Duration::from_secs(6));
        assert_eq!(same.at, renewed_at);
        assert_eq!(
            decide("b", &same, renewed_at + LEASE_DURATION - Duration::from_millis(1)),
            Decision::Wait
        );
        assert_eq!(decide("b", &same, renewed_at + LEASE_DURATION), Decision::Take);
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let t0 = Instant::now();
        let seen = observe(None, record("", "7"), t0);
        assert_eq!(decide("b", &seen, t0), Decision::Take);
    }

    #[test]
    fn an_old_leader_stops_before_a_standby_may_take_over() {
        // At least client-go's margin between the leader stopping and the Lease expiring (15 s − 10 s).
        assert!(LEASE_DURATION - RENEW_DEADLINE >= Duration::from_secs(5));
        assert!(RENEW_DEADLINE + RETRY_PERIOD <= LEASE_DURATION);
        // Worst case from the leader's death to a standby's takeover stays within 15 s.
        assert!(RETRY_PERIOD + LEASE_DURATION + RETRY_PERIOD <= Duration::from_secs(15));
    }

    #[test]
    fn identities_differ_between_processes_and_calls() {
        assert_ne!(identity(), identity());
    }
}
