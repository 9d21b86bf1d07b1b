//! Local search after merging: move single pods between new nodes so that one drops to a cheaper size.
//!
//! Sizes come in steps (a few vCPUs and GiB at a time), so a node whose pods need a little more than
//! one size pays for the next. Greedy packing and pair merges leave many such nodes, each a fraction
//! of a step over, next to nodes whose chosen size has room to spare. This pass first right-sizes
//! every new node (the cheapest size of its pool that holds its pods, as the NodeClaim would get),
//! then, node by node, looks for one pod whose leaving lets the node take a cheaper size, and for
//! another new node whose size already has room for that pod. The receiving node keeps its size, so
//! each move lowers the plan's price by the step the first node drops; moves repeat until none pays.
//!
//! A move keeps every rule the packer keeps: the receiving node must be able to use the pod's
//! offerings (so its zone, capacity type and other domain labels stay those the topology step gave
//! the pod's class, and zone spread counts do not change), and its per-node counters must admit the
//! pod (hostname anti-affinity in both directions, hostname spread caps, host ports). Pods of a
//! hostname affinity group, and pods such a group needs on their node, stay where they are.

use crate::model::resources::NODES;
use crate::scheduling::cancel::Cancelled;
use crate::scheduling::node_fit;
use crate::scheduling::shapes::{fits, Rule};
use crate::scheduling::working::Solver;

/// At most this many sweeps over the new nodes; each sweep tries every node once. Later sweeps find
/// moves that earlier ones opened (a node that received pods may no longer take others, and one that
/// shrank may now take a pod it could not).
const MAX_SWEEPS: usize = 4;

/// Right-sizes every new node, then moves pods between new nodes while a move lowers the price.
pub(crate) fn downsize_nodes(solver: &mut Solver) -> Result<(), Cancelled> {
    let by_price = templates_by_price(solver);
    let new_slots: Vec<usize> = (0..solver.slots().len()).filter(|&i| is_new_with_pods(solver, i)).collect();
    for &i in &new_slots {
        let classes = solver.slots()[i].classes().to_vec();
        let current = current_price(solver, i);
        if let Some((t, mask, price)) = cheapest_fit(solver, &by_price, i, &classes) {
            if price < current - 1e-9 {
                solver.resize_slot(i, t, mask);
            }
        }
    }
    let mut holders = Holders::new(solver, &new_slots);
    for _ in 0..MAX_SWEEPS {
        let mut changed = false;
        for &a in &new_slots {
            solver.check_cancel()?;
            loop {
                if let Some(m) = best_move_from(solver, &by_price, a, &new_slots) {
                    solver.move_pod(a, m.to, m.class, m.template, m.mask);
                    holders.moved(solver, m.class, a, m.to);
                } else if let Some(s) = swap_from(solver, &by_price, a, &holders) {
                    let (t_b, mask_b) = (s.receiver_template, s.receiver_mask);
                    solver.move_pod(a, s.to, s.class, s.template, s.mask);
                    solver.move_pod(s.to, a, s.back, t_b, mask_b);
                    holders.moved(solver, s.class, a, s.to);
                    holders.moved(solver, s.back, s.to, a);
                } else {
                    break;
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(())
}

/// The new nodes holding each class, kept up to date as pods move, so a swap looks only at nodes
/// that hold a pod it could take; and the classes on new nodes grouped by demand, so a swap checks
/// each distinct demand against the room once (pods come in far fewer sizes than classes).
struct Holders {
    of_class: Vec<Vec<usize>>,
    by_demand: Vec<(Vec<i64>, Vec<usize>)>,
}

impl Holders {
    fn new(solver: &Solver, new_slots: &[usize]) -> Self {
        let mut of_class = vec![vec![]; solver.classes().len()];
        for &i in new_slots {
            for &(c, _) in solver.slots()[i].classes() {
                of_class[c].push(i);
            }
        }
        let mut groups: std::collections::BTreeMap<&[i64], Vec<usize>> = std::collections::BTreeMap::new();
        for (c, holding) in of_class.iter().enumerate() {
            if !holding.is_empty() {
                groups.entry(&solver.classes()[c].traits.demand).or_default().push(c);
            }
        }
        let by_demand = groups.into_iter().map(|(demand, classes)| (demand.to_vec(), classes)).collect();
        Holders { of_class, by_demand }
    }

    /// Records that a pod of class `c` went from slot `from` to slot `to`.
    fn moved(&mut self, solver: &Solver, c: usize, from: usize, to: usize) {
        let holds = |i: usize| solver.slots()[i].classes().iter().any(|&(k, _)| k == c);
        let list = &mut self.of_class[c];
        if !holds(from) {
            list.retain(|&i| i != from);
        }
        if !list.contains(&to) {
            list.push(to);
        }
    }
}

/// One pod of `class` leaves its node for `to`; the node it leaves becomes template `template` with
/// offering mask `mask` (or is emptied, when it held only that pod).
struct Move {
    class: usize,
    to: usize,
    template: usize,
    mask: u32,
}

/// The move off node `a` that saves the most, if any saves at all.
fn best_move_from(solver: &Solver, by_price: &[Vec<usize>], a: usize, new_slots: &[usize]) -> Option<Move> {
    let slot = &solver.slots()[a];
    let t_a = slot.template()?;
    let current = current_price(solver, a);
    let mut best: Option<(f64, Move)> = None;
    for (k, &(c, _)) in slot.classes().iter().enumerate() {
        if !may_leave(solver, a, c) {
            continue;
        }
        let mut rest = slot.classes().to_vec();
        rest[k].1 -= 1;
        rest.retain(|(_, n)| *n > 0);
        let (template, mask, price) = if rest.is_empty() {
            (t_a, 0, 0.0)
        } else {
            match cheapest_fit(solver, by_price, a, &rest) {
                Some(fit) => fit,
                None => continue,
            }
        };
        let saving = current - price;
        if saving <= 1e-9 || best.as_ref().is_some_and(|(s, _)| saving <= *s) {
            continue;
        }
        if let Some(to) = receiver(solver, c, a, new_slots) {
            best = Some((saving, Move { class: c, to, template, mask }));
        }
    }
    best.map(|(_, m)| m)
}

/// Node `a` sends one pod of `class` to node `to` and takes one pod of class `back` from it: node `a`
/// becomes `template` with offering mask `mask`, and `to` keeps its template with `receiver_mask`.
struct Swap {
    class: usize,
    back: usize,
    to: usize,
    template: usize,
    mask: u32,
    receiver_template: usize,
    receiver_mask: u32,
}

/// At most this many cheaper sizes are tried for a node that gives up a pod in a swap.
const SWAP_TARGETS: usize = 3;

/// A swap with another new node that lets node `a` take a cheaper size, if there is one: `a` gives a
/// pod and takes back a smaller one, and the other node's size holds the difference without growing
/// (nor its price rising). For each pod and each cheaper size (cheapest first) the first swap found
/// is taken: looking for the best of all would read every node for every pod.
fn swap_from(solver: &Solver, by_price: &[Vec<usize>], a: usize, holders: &Holders) -> Option<Swap> {
    let slot = &solver.slots()[a];
    let t_a = slot.template()?;
    if slot.classes().iter().map(|(_, n)| n).sum::<u64>() < 2 {
        return None;
    }
    let current = current_price(solver, a);
    for (k, &(p, _)) in slot.classes().iter().enumerate() {
        if !may_leave(solver, a, p) {
            continue;
        }
        let mut rest = slot.classes().to_vec();
        rest[k].1 -= 1;
        rest.retain(|(_, n)| *n > 0);
        let demand_rest = node_fit::total_demand(solver, &rest);
        for t in cheaper_sizes(solver, by_price, t_a, &demand_rest, current) {
            let room: Vec<i64> =
                solver.templates()[t].capacity.iter().zip(&demand_rest).map(|(c, d)| c - d).collect();
            for (demand_q, classes) in &holders.by_demand {
                if !fits(demand_q, &room) {
                    continue;
                }
                for &q in classes.iter().filter(|&&q| q != p) {
                    if let Some(swap) = swap_with(solver, holders, (a, p, &rest), (q, demand_q), (t, current))
                    {
                        return Some(swap);
                    }
                }
            }
        }
    }
    None
}

/// The first node holding a pod of class `q` that can trade it for node `a`'s pod of class `p`, so
/// that `a` (holding `rest` besides) becomes a node of template `t` cheaper than `current`.
fn swap_with(
    solver: &Solver,
    holders: &Holders,
    (a, p, rest): (usize, usize, &[(usize, u64)]),
    (q, demand_q): (usize, &[i64]),
    (t, current): (usize, f64),
) -> Option<Swap> {
    let demand_p = &solver.classes()[p].traits.demand;
    let mut mask_a = None;
    for &b in &holders.of_class[q] {
        let other = &solver.slots()[b];
        let Some(t_b) = other.template() else { continue };
        // The other node's size must hold p in place of q.
        let grows = demand_p.iter().zip(demand_q).zip(&other.state().free).any(|((p, q), f)| p - q > *f);
        if b == a || grows || !may_leave(solver, b, q) {
            continue;
        }
        // Whether `a` may take q at the cheaper size does not depend on the other node.
        let cheaper = |m: &u32| solver.templates()[t].price(*m) < current - 1e-9;
        mask_a.get_or_insert_with(|| takes_instead(solver, rest, q, t).filter(cheaper)).as_ref()?;
        let mut rest_b = other.classes().to_vec();
        let kq = rest_b.iter().position(|&(c, _)| c == q).expect("the node holds q");
        rest_b[kq].1 -= 1;
        rest_b.retain(|(_, n)| *n > 0);
        let Some(mask_b) = takes_instead(solver, &rest_b, p, t_b) else { continue };
        let template_b = &solver.templates()[t_b];
        if template_b.price(mask_b) > template_b.price(other.mask()) + 1e-9 {
            continue;
        }
        return Some(Swap {
            class: p,
            back: q,
            to: b,
            template: t,
            mask: node_fit::joint_mask(solver, rest, t),
            receiver_template: t_b,
            receiver_mask: mask_b,
        });
    }
    None
}

/// Up to [`SWAP_TARGETS`] templates of `t`'s pool cheaper than `current` that hold `demand`,
/// cheapest first. A pool with limits takes no size larger than `t` in any limited resource.
fn cheaper_sizes(
    solver: &Solver,
    by_price: &[Vec<usize>],
    t: usize,
    demand: &[i64],
    current: f64,
) -> Vec<usize> {
    let pool = solver.templates()[t].pool;
    let mut out = vec![];
    for &candidate in &by_price[pool] {
        let tpl = &solver.templates()[candidate];
        if tpl.price(tpl.full_mask()) >= current - 1e-9 || out.len() == SWAP_TARGETS {
            break;
        }
        if fits(demand, &tpl.capacity) && within_limits(solver, candidate, t) {
            out.push(candidate);
        }
    }
    out
}

/// The offering mask of a node of template `t` holding `classes` and one more pod of class `c`, if
/// such a node may exist (requirements, offerings and per-node rules); capacity is the caller's.
fn takes_instead(solver: &Solver, classes: &[(usize, u64)], c: usize, t: usize) -> Option<u32> {
    if !classes.iter().all(|&(other, _)| other == c || solver.pair_ok(other, c)) {
        return None;
    }
    let mut with = classes.to_vec();
    match with.iter_mut().find(|(k, _)| *k == c) {
        Some(e) => e.1 += 1,
        None => with.push((c, 1)),
    }
    let mask = node_fit::joint_mask(solver, &with, t);
    (mask != 0 && node_fit::rules_allow(solver, &with)).then_some(mask)
}

/// Whether one pod of class `c` may leave node `a`: it is not in a hostname affinity group, and no
/// hostname affinity on the node needs it there.
fn may_leave(solver: &Solver, a: usize, c: usize) -> bool {
    let traits = &solver.classes()[c].traits;
    if traits.rules.iter().any(|r| matches!(r, Rule::Affinity { .. })) {
        return false;
    }
    !solver.slots()[a].classes().iter().any(|&(other, _)| {
        solver.classes()[other].traits.rules.iter().any(|r| match *r {
            Rule::Affinity { selector, .. } => traits.matched_by.binary_search(&selector).is_ok(),
            _ => false,
        })
    })
}

/// The new node other than `from` that takes one pod of class `c` without a larger size, leaving
/// the least room behind (so larger gaps stay open for larger pods); ties go to the lower index.
fn receiver(solver: &Solver, c: usize, from: usize, new_slots: &[usize]) -> Option<usize> {
    let class = &solver.classes()[c];
    let mut best: Option<(i64, usize)> = None;
    for &b in new_slots {
        let slot = &solver.slots()[b];
        let Some(t) = slot.template() else { continue };
        if b == from || slot.classes().is_empty() || !fits(&class.traits.demand, &slot.state().free) {
            continue;
        }
        // The node's price must not rise: the pod's offerings may leave out its cheapest one.
        let mask = slot.mask() & class.masks[t];
        let template = &solver.templates()[t];
        if mask == 0 || template.price(mask) > template.price(slot.mask()) + 1e-9 {
            continue;
        }
        if slot.state().max_addable(&class.traits, 1, |_| false) == 0 {
            continue;
        }
        if !slot.classes().iter().all(|&(other, _)| other == c || solver.pair_ok(other, c)) {
            continue;
        }
        let left = room_left(solver, t, &slot.state().free, &class.traits.demand);
        if best.is_none_or(|(l, _)| left < l) {
            best = Some((left, b));
        }
    }
    best.map(|(_, b)| b)
}

/// The room a node of template `t` keeps after taking `demand`, as the sum of its shares of the
/// node's capacity in parts per million (so CPU and memory weigh alike).
fn room_left(solver: &Solver, t: usize, free: &[i64], demand: &[i64]) -> i64 {
    let capacity = &solver.templates()[t].capacity;
    free.iter()
        .zip(demand)
        .zip(capacity)
        .filter(|(_, c)| **c > 0)
        .map(|((f, d), c)| ((f - d) as i128 * 1_000_000 / *c as i128) as i64)
        .sum()
}

/// Whether slot `i` is a new node holding pods.
fn is_new_with_pods(solver: &Solver, i: usize) -> bool {
    let slot = &solver.slots()[i];
    slot.existing().is_none() && slot.template().is_some() && !slot.classes().is_empty()
}

/// What new slot `i` costs now.
fn current_price(solver: &Solver, i: usize) -> f64 {
    let slot = &solver.slots()[i];
    slot.template().map_or(0.0, |t| solver.templates()[t].price(slot.mask()))
}

/// Each pool's templates, cheapest possible offering first (ties by index).
fn templates_by_price(solver: &Solver) -> Vec<Vec<usize>> {
    let mut by_pool = vec![vec![]; solver.input().nodepools.len()];
    for (t, tpl) in solver.templates().iter().enumerate() {
        by_pool[tpl.pool].push(t);
    }
    let floor = |t: usize| solver.templates()[t].price(solver.templates()[t].full_mask());
    for list in &mut by_pool {
        list.sort_by(|&a, &b| floor(a).total_cmp(&floor(b)).then_with(|| a.cmp(&b)));
    }
    by_pool
}

/// The cheapest template of slot `i`'s pool that holds `classes`: what the NodeClaim of a node with
/// these pods would be right-sized to. A pool with limits takes no size larger than the slot's own
/// in any limited resource, so downsizing never uses more of a limit.
fn cheapest_fit(
    solver: &Solver,
    by_price: &[Vec<usize>],
    i: usize,
    classes: &[(usize, u64)],
) -> Option<(usize, u32, f64)> {
    let chosen = solver.slots()[i].template()?;
    let pool = solver.templates()[chosen].pool;
    if !node_fit::rules_allow(solver, classes) {
        return None;
    }
    let demand = node_fit::total_demand(solver, classes);
    let mut best: Option<(usize, u32, f64)> = None;
    for &t in &by_price[pool] {
        let tpl = &solver.templates()[t];
        // No later template can be cheaper than its cheapest offering.
        if best.is_some_and(|(_, _, price)| tpl.price(tpl.full_mask()) >= price) {
            break;
        }
        if !fits(&demand, &tpl.capacity) {
            continue;
        }
        if !within_limits(solver, t, chosen) {
            continue;
        }
        let mask = node_fit::joint_mask(solver, classes, t);
        if mask == 0 {
            continue;
        }
        let price = tpl.price(mask);
        if best.is_none_or(|(_, _, b)| price < b) {
            best = Some((t, mask, price));
        }
    }
    best
}

/// Whether template `t` may replace template `chosen` of the same pool: a pool with limits takes no
/// size larger than the node's own in any limited resource, so a smaller node never uses more of a
/// limit.
fn within_limits(solver: &Solver, t: usize, chosen: usize) -> bool {
    let pool = solver.templates()[chosen].pool;
    let Some(limits) = solver.input().nodepools[pool].remaining.as_ref() else { return true };
    let capacity_of = |x: usize| {
        let tpl = &solver.templates()[x];
        &solver.input().nodepools[pool].instance_types[tpl.instance_type].capacity
    };
    limits.iter().all(|(name, _)| name == NODES || capacity_of(t).get(name) <= capacity_of(chosen).get(name))
}
