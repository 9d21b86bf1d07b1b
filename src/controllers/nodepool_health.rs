//! `NodeRegistrationHealthy` on a NodePool (upstream core's condition, design
//! `designs/noderegistrationhealthy-status-condition.md`): whether the nodes its claims launch join the
//! cluster. A claim that registers counts as a success; one deleted for not registering in time (or not
//! launching) as a failure. Per pool the last [`HISTORY`] outcomes are kept in memory:
//! - none yet: the condition is left as it is (Unknown on a new pool);
//! - at least [`FAILURES`] failures among them and the latest a failure: False, with the likely causes;
//! - otherwise, after at least one success: True.
//!
//! A restart forgets the history and leaves the condition as written. Only the leader records.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// How many recent outcomes decide.
pub const HISTORY: usize = 10;
/// How many failures among them make the pool unhealthy (one could be a bad VM).
pub const FAILURES: usize = 2;

/// What the condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    Healthy,
    Unhealthy { failed: usize, of: usize },
}

impl Registration {
    /// The condition's status, reason and message.
    pub fn condition(&self) -> (bool, &'static str, String) {
        match self {
            Registration::Healthy => (true, "NodeRegistrationHealthy", String::new()),
            Registration::Unhealthy { failed, of } => (
                false,
                "RegistrationFailed",
                format!(
                    "{failed} of the last {of} NodeClaims did not register in time; check the bootstrap token \
                     (KUBELET_BOOTSTRAP_TOKEN), the cluster CA and that the subnet reaches the API server"
                ),
            ),
        }
    }
}

/// The recent launch outcomes of each NodePool.
#[derive(Debug, Default)]
pub struct RegistrationHistory {
    pools: Mutex<BTreeMap<String, VecDeque<bool>>>,
}

impl RegistrationHistory {
    /// A claim of `pool` registered (`true`) or was given up (`false`).
    pub fn record(&self, pool: &str, registered: bool) {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let history = pools.entry(pool.to_string()).or_default();
        history.push_back(registered);
        while history.len() > HISTORY {
            history.pop_front();
        }
    }

    /// What `pool`'s condition should say; None while nothing was recorded.
    pub fn state(&self, pool: &str) -> Option<Registration> {
        let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let history = pools.get(pool).filter(|h| !h.is_empty())?;
        let failed = history.iter().filter(|ok| !**ok).count();
        let latest_failed = history.back() == Some(&false);
        if failed >= FAILURES && latest_failed {
            Some(Registration::Unhealthy { failed, of: history.len() })
        } else if history.iter().any(|ok| *ok) {
            Some(Registration::Healthy)
        } else {
            None
        }
    }

    /// Forgets pools that are gone.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).retain(|pool, _| keep(pool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_failures_with_the_latest_failed_are_unhealthy_and_a_registration_heals() {
        let history = RegistrationHistory::default();
        assert_eq!(history.state("p"), None);
        history.record("p", false);
        assert_eq!(history.state("p"), None, "one failure and no success: not known yet");
        history.record("p", false);
        assert_eq!(history.state("p"), Some(Registration::Unhealthy { failed: 2, of: 2 }));
        history.record("p", true);
        assert_eq!(history.state("p"), Some(Registration::Healthy), "the fix worked");
        history.record("p", false);
        assert_eq!(history.state("p"), Some(Registration::Unhealthy { failed: 3, of: 4 }));
        for _ in 0..HISTORY {
            history.record("p", true);
        }
        assert_eq!(history.state("p"), Some(Registration::Healthy));
        let (ok, reason, _) = Registration::Unhealthy { failed: 2, of: 3 }.condition();
        assert!(!ok && reason == "RegistrationFailed");
    }
}
