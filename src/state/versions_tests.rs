//! The index never goes back in time, over any interleaving of one NodeClaim's watch events (in order)
//! with the responses of the controller's own writes (in any order, each after its write happened).

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::Cluster;
use crate::apis::NodeClaim;

/// One step of the claim's history: its object under `uid` at revision `rv`, or its deletion.
#[derive(Clone, Debug)]
struct Step {
    uid: &'static str,
    rv: u64,
    deleted: bool,
    /// The controller made this write and applies its response.
    written: bool,
}

fn claim(uid: &str, rv: u64) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c", "uid": uid, "resourceVersion": rv.to_string()},
        "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "d"},
                 "requirements": []}
    }))
    .expect("a NodeClaim")
}

/// A history: the claim is created, updated `first` times, deleted; then, when `again`, created anew
/// under another uid and updated `second` times, deleted when `gone`.
fn history(first: usize, again: bool, second: usize, gone: bool, written: &[bool]) -> Vec<Step> {
    let mut steps = vec![];
    let mut push = |uid: &'static str, deleted: bool| {
        let rv = steps.len() as u64 + 1;
        let written = !deleted && written.get(steps.len()).copied().unwrap_or(false);
        steps.push(Step { uid, rv, deleted, written });
    };
    for _ in 0..=first {
        push("u1", false);
    }
    push("u1", true);
    if again {
        for _ in 0..=second {
            push("u2", false);
        }
        if gone {
            push("u2", true);
        }
    }
    steps
}

fn deliver(cluster: &mut Cluster, step: &Step) {
    let object = claim(step.uid, step.rv);
    if step.deleted {
        cluster.delete(&object);
    } else {
        cluster.apply(&object);
    }
}

proptest! {
    #![proptest_config(karpenter_azure_core::proptest_config::config(256))]

    #[test]
    fn the_index_never_goes_back_in_time(
        first in 0usize..4,
        again in any::<bool>(),
        second in 0usize..4,
        gone in any::<bool>(),
        written in proptest::collection::vec(any::<bool>(), 12),
        choices in proptest::collection::vec(0u8..3, 60),
    ) {
        let steps = history(first, again, second, gone, &written);
        let mut cluster = Cluster::new();
        let (mut happened, mut watched) = (0, 0);
        let mut pending: Vec<usize> = vec![];
        let mut floor = 0u64;
        let mut deleted_uids = BTreeSet::new();
        let mut choices = choices.into_iter();
        loop {
            // Advance time, deliver the next watch event, or deliver a pending write's response.
            let choice = choices.next().unwrap_or(1);
            let delivered = if choice == 0 && happened < steps.len() {
                if steps[happened].written {
                    pending.push(happened);
                }
                happened += 1;
                None
            } else if choice == 2 && !pending.is_empty() {
                let pick = usize::from(choices.next().unwrap_or(0)) % pending.len();
                Some(pending.remove(pick))
            } else if watched < happened {
                watched += 1;
                Some(watched - 1)
            } else if happened < steps.len() {
                happened += 1;
                if steps[happened - 1].written {
                    pending.push(happened - 1);
                }
                None
            } else if let Some(i) = pending.pop() {
                Some(i)
            } else {
                break;
            };
            let Some(i) = delivered else { continue };
            deliver(&mut cluster, &steps[i]);
            if steps[i].deleted && i < watched {
                deleted_uids.insert(steps[i].uid);
            }
            match cluster.nodeclaim("c") {
                Some(held) => {
                    let rv: u64 = held.resource_version.as_deref().unwrap().parse().unwrap();
                    prop_assert!(rv >= floor, "held rv {rv} after {floor} (step {i})");
                    prop_assert!(!deleted_uids.contains(held.uid.as_deref().unwrap()), "a deleted claim came back");
                    floor = rv;
                }
                None => {
                    if steps[i].deleted {
                        floor = floor.max(steps[i].rv);
                    }
                }
            }
        }
        // Everything delivered: the index holds what the cluster holds.
        let last = steps.last().unwrap();
        match cluster.nodeclaim("c") {
            Some(held) => {
                prop_assert!(!last.deleted, "the claim was deleted in the end");
                prop_assert_eq!(held.resource_version.clone(), Some(last.rv.to_string()));
            }
            None => prop_assert!(last.deleted, "the claim exists in the end"),
        }
    }
}
