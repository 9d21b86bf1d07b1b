//! NodePool disruption budgets: how many of a pool's nodes may be disrupting at once, per reason, at a
//! given time (upstream `pkg/apis/v1/nodepool.go` `GetAllowedDisruptionsByReason` and
//! `pkg/controllers/disruption/helpers.go` `BuildDisruptionBudgetMapping`).
//!
//! - `nodes` is a count or a percentage of the pool's initialized nodes, percentages rounded up;
//! - a budget with `schedule` and `duration` is active only within `duration` after each cron firing
//!   (UTC); one without is always active;
//! - a budget applies to the reasons it lists, or to all when it lists none;
//! - the most restrictive active budget wins; no active budget means no limit;
//! - nodes already disrupting (marked for deletion, or NotReady) use up the allowance.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::apis::nodepool::{Budget as ApiBudget, DisruptionReason};

use super::command::BlockReason;
use super::cron::Cron;
use super::snapshot::Snapshot;

/// A parsed budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub nodes: BudgetNodes,
    /// When the budget is active; always when `None`.
    pub window: Option<BudgetWindow>,
    /// The reasons it limits; every reason when empty.
    pub reasons: Vec<DisruptionReason>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetNodes {
    Count(u32),
    /// 0..=100.
    Percent(u32),
}

#[derive(Clone, Debug, PartialEq)]
pub struct BudgetWindow {
    pub schedule: Cron,
    /// Spelled as written, for messages.
    pub schedule_text: String,
    pub duration: Duration,
}

/// A budget that cannot be read; `field` names it, such as `spec.disruption.budgets[1].schedule`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BudgetError {
    pub field: String,
    pub message: String,
}

impl Budget {
    /// Reads `spec.disruption.budgets[index]`.
    pub fn parse(api: &ApiBudget, index: usize) -> Result<Budget, BudgetError> {
        let field = |name: &str| format!("spec.disruption.budgets[{index}].{name}");
        let nodes =
            parse_nodes(&api.nodes).map_err(|message| BudgetError { field: field("nodes"), message })?;
        let window = match (&api.schedule, &api.duration) {
            (None, None) => None,
            (Some(schedule), Some(duration)) => Some(BudgetWindow {
                schedule: Cron::parse(schedule)
                    .map_err(|e| BudgetError { field: field("schedule"), message: e.to_string() })?,
                schedule_text: schedule.clone(),
                duration: crate::apis::duration::parse(duration)
                    .map_err(|e| BudgetError { field: field("duration"), message: e.to_string() })?,
            }),
            (Some(_), None) => {
                return Err(BudgetError {
                    field: field("duration"),
                    message: "a schedule needs a duration; add one such as 8h".into(),
                })
            }
            (None, Some(_)) => {
                return Err(BudgetError {
                    field: field("schedule"),
                    message: "a duration needs a schedule; add a cron schedule such as \"0 9 * * *\"".into(),
                })
            }
        };
        Ok(Budget { nodes, window, reasons: api.reasons.clone() })
    }

    /// Reads a pool's whole budget list.
    pub fn parse_all(api: &[ApiBudget]) -> Result<Vec<Budget>, BudgetError> {
        api.iter().enumerate().map(|(i, b)| Budget::parse(b, i)).collect()
    }

    /// Whether the budget limits `reason` at `now`.
    pub fn applies(&self, reason: DisruptionReason, now: Timestamp) -> bool {
        (self.reasons.is_empty() || self.reasons.contains(&reason))
            && self.window.as_ref().is_none_or(|w| w.schedule.last_fire_within(now, w.duration).is_some())
    }

    /// How many nodes of a pool of `pool_nodes` this budget allows to be disrupting at once.
    pub fn allowed(&self, pool_nodes: usize) -> usize {
        match self.nodes {
            BudgetNodes::Count(n) => n as usize,
            BudgetNodes::Percent(p) => (pool_nodes * p as usize).div_ceil(100),
        }
    }
}

fn parse_nodes(text: &str) -> Result<BudgetNodes, String> {
    let fix = "write a whole number such as 5 or a percentage from 0% to 100% such as 10%";
    if let Some(p) = text.strip_suffix('%') {
        return match p.parse::<u32>() {
            Ok(p) if p <= 100 => Ok(BudgetNodes::Percent(p)),
            _ => Err(format!("{text:?} is not a percentage from 0% to 100%; {fix}")),
        };
    }
    text.parse::<u32>().map(BudgetNodes::Count).map_err(|_| format!("{text:?} is not a node count; {fix}"))
}

/// What a pool's budgets allow for one reason right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// More nodes that may start disrupting (`None`: unlimited).
    pub remaining: Option<usize>,
    /// The budget that set the limit, for messages: its index and nodes value.
    pub limited_by: Option<String>,
    /// Nodes of the pool already disrupting.
    pub disrupting: usize,
}

impl Allowance {
    pub fn allows(&self, more: usize) -> bool {
        self.remaining.is_none_or(|r| more <= r)
    }
}

/// Each pool's allowance for `reason` at `now` (pools missing from the snapshot allow nothing).
pub fn allowances(
    snapshot: &Snapshot,
    reason: DisruptionReason,
    now: Timestamp,
) -> BTreeMap<String, Allowance> {
    let mut nodes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut disrupting: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &snapshot.nodes {
        if n.initialized.is_some() {
            *nodes.entry(n.nodepool.as_str()).or_default() += 1;
        }
        if n.marked_for_deletion || (n.initialized.is_some() && !n.ready) {
            *disrupting.entry(n.nodepool.as_str()).or_default() += 1;
        }
    }
    snapshot
        .nodepools
        .iter()
        .map(|pool| {
            let total = nodes.get(pool.name.as_str()).copied().unwrap_or(0);
            let busy = disrupting.get(pool.name.as_str()).copied().unwrap_or(0);
            let tightest = pool
                .budgets
                .iter()
                .enumerate()
                .filter(|(_, b)| b.applies(reason, now))
                .map(|(i, b)| (b.allowed(total), i, b))
                .min_by_key(|(allowed, i, _)| (*allowed, *i));
            let allowance = match tightest {
                None => Allowance { remaining: None, limited_by: None, disrupting: busy },
                Some((allowed, i, b)) => Allowance {
                    remaining: Some(allowed.saturating_sub(busy)),
                    limited_by: Some(describe(i, b)),
                    disrupting: busy,
                },
            };
            (pool.name.clone(), allowance)
        })
        .collect()
}

/// The nodes of `order` a move may take together, in order, while each one's pool has allowance
/// left; and every other node, with the `Budget` reason naming the budget that stopped it. A node
/// whose pool has no allowance (a pool missing from the snapshot) is in neither list.
pub fn within(
    snapshot: &Snapshot,
    order: &[usize],
    allowances: &BTreeMap<String, Allowance>,
    reason: DisruptionReason,
) -> (Vec<usize>, Vec<(usize, BlockReason)>) {
    let mut remaining: BTreeMap<&str, Option<usize>> =
        allowances.iter().map(|(pool, a)| (pool.as_str(), a.remaining)).collect();
    let (mut taken, mut refused) = (vec![], vec![]);
    for &i in order {
        let pool = snapshot.nodes[i].nodepool.as_str();
        match remaining.get_mut(pool) {
            None => {}
            Some(Some(0)) => refused.push((
                i,
                BlockReason::Budget {
                    nodepool: pool.to_string(),
                    reason,
                    limited_by: allowances[pool].limited_by.clone().unwrap_or_default(),
                },
            )),
            Some(Some(n)) => {
                *n -= 1;
                taken.push(i);
            }
            Some(None) => taken.push(i),
        }
    }
    (taken, refused)
}

fn describe(index: usize, budget: &Budget) -> String {
    let nodes = match budget.nodes {
        BudgetNodes::Count(n) => n.to_string(),
        BudgetNodes::Percent(p) => format!("{p}%"),
    };
    match &budget.window {
        None => format!("budgets[{index}] (nodes: {nodes})"),
        Some(w) => format!(
            "budgets[{index}] (nodes: {nodes}, schedule {:?} for {}m)",
            w.schedule_text,
            w.duration.as_secs() / 60
        ),
    }
}
