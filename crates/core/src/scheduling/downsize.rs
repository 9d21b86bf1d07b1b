//! Local search after merging: move pods between new nodes so that one drops to a cheaper size.
//!
//! Sizes come in steps (a few vCPUs and GiB at a time), so a node whose pods need a little more than
//! one size pays for the next. Greedy packing and pair merges leave many such nodes, each a fraction
//! of a step over, next to nodes whose chosen size has room to spare. This pass first right-sizes
//! every new node (the cheapest size of its pool that holds its pods, as the NodeClaim would get),
//! then tries, node by node, three kinds of step, each lowering the plan's price by what the node
//! saves, since every other node keeps its size and price:
//! 1. one pod leaves for another new node whose size has room for it;
//! 2. several pods leave together, each for a different node with room, where no one of them makes
//!    the step alone;
//! 3. one pod trades places with a smaller pod of another node whose size holds the difference.
//!
//! Steps repeat until none pays (or a few sweeps have passed).
//!
//! A move keeps every rule the packer keeps: the receiving node must be able to use the pod's
//! offerings (so its zone, capacity type and other domain labels stay those the topology step gave
//! the pod's class, and zone spread counts do not change), and its per-node counters must admit the
//! pod (hostname anti-affinity in both directions, hostname spread caps, host ports). Pods of a
//! hostname affinity group, and pods such a group needs on their node, stay where they are.

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

use crate::scheduling::cancel::Cancelled;
use crate::scheduling::node_fit;
use crate::scheduling::shapes::{fits, Rule};
use crate::scheduling::working::Solver;

/// At most this many sweeps over the new nodes; each sweep tries every node once. Later sweeps find
/// moves that earlier ones opened (a node that received pods may no longer take others, and one that
/// shrank may now take a pod it could not).
const MAX_SWEEPS: usize = 4;

/// Right-sizes every new node, then moves pods between new nodes while a step lowers the price.
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
    let mut receivers = Receivers::new(solver, &new_slots);
    for _ in 0..MAX_SWEEPS {
        let mut changed = false;
        for &a in &new_slots {
            solver.check_cancel()?;
            loop {
                if let Some(m) = best_move_from(solver, &by_price, a, &mut receivers) {
                    solver.move_pod(a, m.to, m.class, m.template, m.mask);
                    holders.moved(solver, m.class, a, m.to);
                    receivers.refresh(solver, &[a, m.to]);
                } else if let Some(chain) = chain_from(solver, &by_price, a, &mut receivers) {
                    solver.move_pods(a, &chain.moves, chain.template, chain.mask);
                    for &(c, to) in &chain.moves {
                        holders.moved(solver, c, a, to);
                        receivers.refresh(solver, &[to]);
                    }
                    receivers.refresh(solver, &[a]);
                } else if let Some(s) = swap_from(solver, &by_price, a, &holders, &mut receivers) {
                    let (t_b, mask_b) = (s.receiver_template, s.receiver_mask);
                    solver.move_pod(a, s.to, s.class, s.template, s.mask);
                    solver.move_pod(s.to, a, s.back, t_b, mask_b);
                    holders.moved(solver, s.class, a, s.to);
                    holders.moved(solver, s.back, s.to, a);
                    receivers.refresh(solver, &[a, s.to]);
                } else {
                    break;
                }
                receivers.changed();
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
    /// Per class, its holders in ascending order, so a swap takes the lowest that works however
    /// it finds the candidates.
    of_class: Vec<Vec<usize>>,
    by_demand: Vec<(Vec<i64>, Vec<usize>)>,
    /// Per class, its position in `by_demand` (None for a class no new node held at the start).
    demand_of: Vec<Option<usize>>,
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
        let by_demand: Vec<(Vec<i64>, Vec<usize>)> =
            groups.into_iter().map(|(demand, classes)| (demand.to_vec(), classes)).collect();
        let mut demand_of = vec![None; of_class.len()];
        for (k, (_, classes)) in by_demand.iter().enumerate() {
            for &c in classes {
                demand_of[c] = Some(k);
            }
        }
        Holders { of_class, by_demand, demand_of }
    }

    /// Records that a pod of class `c` went from slot `from` to slot `to`.
    fn moved(&mut self, solver: &Solver, c: usize, from: usize, to: usize) {
        let holds = |i: usize| solver.slots()[i].classes().iter().any(|&(k, _)| k == c);
        let list = &mut self.of_class[c];
        if !holds(from) {
            list.retain(|&i| i != from);
        }
        if let Err(at) = list.binary_search(&to) {
            list.insert(at, to);
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
fn best_move_from(
    solver: &Solver,
    by_price: &[Vec<usize>],
    a: usize,
    receivers: &mut Receivers,
) -> Option<Move> {
    let slot = &solver.slots()[a];
    let t_a = slot.template()?;
    let current = current_price(solver, a);
    let mut best: Option<(f64, Move)> = None;
    for &(c, _) in slot.classes() {
        if !may_leave(solver, a, c) {
            continue;
        }
        let rest = without(slot.classes(), &[c]);
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
        if let Some(to) = receivers.find(solver, c, a, &[]) {
            best = Some((saving, Move { class: c, to, template, mask }));
        }
    }
    best.map(|(_, m)| m)
}

/// Several pods leave node `a`, each for another node (`(class, to)`, no node twice), and `a`
/// becomes `template` with offering mask `mask`.
struct Chain {
    moves: Vec<(usize, usize)>,
    template: usize,
    mask: u32,
}

/// At most this many cheaper sizes, nearest first, are tried for a node that gives up several pods.
const CHAIN_TARGETS: usize = 2;

/// Pods that leave node `a` together, each for a different node whose size has room for it, so that
/// `a` takes a cheaper size: no one of them makes the step alone. The pods are chosen greedily, the
/// largest in the resource most over the cheaper size first, among those some node can take.
fn chain_from(
    solver: &Solver,
    by_price: &[Vec<usize>],
    a: usize,
    receivers: &mut Receivers,
) -> Option<Chain> {
    let slot = &solver.slots()[a];
    let t_a = slot.template()?;
    let current = current_price(solver, a);
    let demand = node_fit::total_demand(solver, slot.classes());
    let pool = solver.templates()[t_a].pool;
    let mut pods: Vec<usize> = vec![];
    for &(c, n) in slot.classes() {
        if may_leave(solver, a, c) {
            pods.extend(std::iter::repeat_n(c, n as usize));
        }
    }
    if pods.len() < 2 {
        return None;
    }
    let movable = pods.iter().fold(vec![0i64; demand.len()], |mut sum, &c| {
        sum.iter_mut().zip(&solver.classes()[c].traits.demand).for_each(|(s, d)| *s += d);
        sum
    });
    let floor = |t: usize| solver.templates()[t].price(solver.templates()[t].full_mask());
    let cheaper = by_price[pool].partition_point(|&t| floor(t) < current - 1e-9);
    let targets =
        by_price[pool][..cheaper].iter().rev().filter(|&&t| node_fit::within_pool_limits(solver, t, t_a));
    for &t in targets.take(CHAIN_TARGETS) {
        let capacity = &solver.templates()[t].capacity;
        let mut excess: Vec<i64> = demand.iter().zip(capacity).map(|(d, c)| d - c).collect();
        // The pods that may leave must be able to cover the excess at all.
        if excess.iter().zip(&movable).any(|(e, m)| e > m) {
            continue;
        }
        // The resource the node is furthest over the cheaper size in, as a share of that size.
        let Some(key) = (0..excess.len()).filter(|&d| excess[d] > 0 && capacity[d] > 0).max_by(|&x, &y| {
            (excess[x] as f64 / capacity[x] as f64).total_cmp(&(excess[y] as f64 / capacity[y] as f64))
        }) else {
            continue;
        };
        let mut order = pods.clone();
        order.sort_by_key(|&c| std::cmp::Reverse(solver.classes()[c].traits.demand[key]));
        let mut moves: Vec<(usize, usize)> = vec![];
        let mut taken: Vec<usize> = vec![];
        for c in order {
            if excess.iter().all(|e| *e <= 0) {
                break;
            }
            let d = &solver.classes()[c].traits.demand;
            if !excess.iter().zip(d).any(|(e, d)| *e > 0 && *d > 0) {
                continue;
            }
            if let Some(to) = receivers.find(solver, c, a, &taken) {
                moves.push((c, to));
                taken.push(to);
                excess.iter_mut().zip(d).for_each(|(e, d)| *e -= d);
            }
        }
        if moves.len() < 2 || excess.iter().any(|e| *e > 0) {
            continue;
        }
        let leaving: Vec<usize> = moves.iter().map(|&(c, _)| c).collect();
        let rest = without(slot.classes(), &leaving);
        if !node_fit::rules_allow(solver, &rest) {
            continue;
        }
        let mask = node_fit::joint_mask(solver, &rest, t);
        if mask != 0 && solver.templates()[t].price(mask) < current - 1e-9 {
            return Some(Chain { moves, template: t, mask });
        }
    }
    None
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
fn swap_from(
    solver: &Solver,
    by_price: &[Vec<usize>],
    a: usize,
    holders: &Holders,
    receivers: &mut Receivers,
) -> Option<Swap> {
    let slot = &solver.slots()[a];
    let t_a = slot.template()?;
    if slot.classes().iter().map(|(_, n)| n).sum::<u64>() < 2 {
        return None;
    }
    let current = current_price(solver, a);
    for &(p, _) in slot.classes() {
        if !may_leave(solver, a, p) {
            continue;
        }
        let rest = without(slot.classes(), &[p]);
        let demand_rest = node_fit::total_demand(solver, &rest);
        let demand_p = &solver.classes()[p].traits.demand;
        for t in cheaper_sizes(solver, by_price, t_a, &demand_rest, current) {
            let room: Vec<i64> =
                solver.templates()[t].capacity.iter().zip(&demand_rest).map(|(c, d)| c - d).collect();
            for (k, (demand_q, classes)) in holders.by_demand.iter().enumerate() {
                if !fits(demand_q, &room) {
                    continue;
                }
                // Read once per pair of sizes until a node changes, for every size and node tried.
                let sizes = holders.demand_of[p].map(|given| (given, k));
                let partners = Partners::of(receivers, sizes, demand_p, demand_q);
                if partners.none() {
                    continue;
                }
                for &q in classes.iter().filter(|&&q| q != p) {
                    let candidates = partners.holding(solver, holders, q);
                    let found = swap_with(solver, &candidates, (a, p, &rest), (q, demand_q), (t, current));
                    debug_assert_eq!(
                        found.as_ref().map(|s| s.to),
                        swap_with(solver, &holders.of_class[q], (a, p, &rest), (q, demand_q), (t, current))
                            .map(|s| s.to),
                        "the nodes with room for the difference find what reading every holder finds"
                    );
                    if found.is_some() {
                        return found;
                    }
                }
            }
        }
    }
    None
}

/// The nodes that could take a pod of one size in place of one of another: those with free capacity
/// for the difference. Most nodes of a packed plan are full, so when the pod given is larger in some
/// resource these are few, found from the receivers' lists by free capacity, and a swap reads them
/// instead of every holder of the pod it takes back.
enum Partners {
    /// The new nodes with room for the difference, ascending.
    WithRoom(Vec<usize>),
    /// The pod given is no larger in any resource: any holder may do.
    Any,
}

impl Partners {
    /// The partners for giving a pod of `demand_given` and taking back one of `demand_taken`, read
    /// once per refresh for each pair of sizes when `sizes` says which they are.
    fn of(
        receivers: &mut Receivers,
        sizes: Option<(usize, usize)>,
        demand_given: &[i64],
        demand_taken: &[i64],
    ) -> Rc<Self> {
        if let Some(partners) = sizes.and_then(|key| receivers.partners.get(&key)) {
            return Rc::clone(partners);
        }
        let extra: Vec<i64> = demand_given.iter().zip(demand_taken).map(|(g, t)| (g - t).max(0)).collect();
        let partners = Rc::new(Partners::new(receivers, &extra));
        if let Some(key) = sizes {
            receivers.partners.insert(key, Rc::clone(&partners));
        }
        partners
    }

    fn new(receivers: &Receivers, extra: &[i64]) -> Self {
        if extra.iter().all(|&e| e == 0) {
            return Partners::Any;
        }
        let mut with_room: Vec<usize> =
            receivers.with_room(extra).filter(|&b| fits(extra, receivers.free_of(b))).collect();
        with_room.sort_unstable();
        Partners::WithRoom(with_room)
    }

    /// Whether no node has room for the difference.
    fn none(&self) -> bool {
        matches!(self, Partners::WithRoom(nodes) if nodes.is_empty())
    }

    /// The candidates that hold a pod of class `q`, ascending: the shorter of the two lists to read.
    fn holding<'h>(&self, solver: &Solver, holders: &'h Holders, q: usize) -> Cow<'h, [usize]> {
        let of_class = &holders.of_class[q];
        match self {
            Partners::WithRoom(nodes) if nodes.len() < of_class.len() => Cow::Owned(
                nodes
                    .iter()
                    .copied()
                    .filter(|&b| solver.slots()[b].classes().iter().any(|&(k, _)| k == q))
                    .collect(),
            ),
            _ => Cow::Borrowed(of_class),
        }
    }
}

/// The first of `candidates` (nodes, ascending) holding a pod of class `q` that can trade it for node
/// `a`'s pod of class `p`, so that `a` (holding `rest` besides) becomes a node of template `t`
/// cheaper than `current`.
fn swap_with(
    solver: &Solver,
    candidates: &[usize],
    (a, p, rest): (usize, usize, &[(usize, u64)]),
    (q, demand_q): (usize, &[i64]),
    (t, current): (usize, f64),
) -> Option<Swap> {
    let demand_p = &solver.classes()[p].traits.demand;
    let mut mask_a = None;
    for &b in candidates {
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
        let rest_b = without(other.classes(), &[q]);
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
        if fits(demand, &tpl.capacity) && node_fit::within_pool_limits(solver, candidate, t) {
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

/// Finds the node that takes a moving pod. Each search reads every node that has room; to read
/// fewer, it remembers for each class the last search's answer, and later searches read only the
/// nodes changed since (see [`Receivers::find`]).
struct Receivers {
    /// Every slot's free capacity, `dims` values per slot in one run of memory.
    free: Vec<i64>,
    /// Every slot's capacity at its size, laid out as `free`, and whether it is a new node holding
    /// pods (the only ones that take a moving pod): a search reads these for every node with room,
    /// so they are kept here, next to each other, rather than looked up through the slot and its
    /// template.
    capacity: Vec<i64>,
    holds_pods: Vec<bool>,
    dims: usize,
    /// Per dimension, the new slots as (free capacity, slot), ascending: a pod needs a node with
    /// room in every dimension, so only the tail of one list, found by binary search, is read. The
    /// list with the shortest tail is taken; most nodes are full and are never visited.
    by_free: Vec<Vec<(i64, usize)>>,
    /// Each slot's price and the bit of the offering it is priced at: a pod whose offerings keep
    /// that one leaves the price as it is, with no need to price the narrower mask.
    price: Vec<(f64, u32)>,
    /// Per class, the last search with nothing skipped.
    last: Vec<Option<Search>>,
    /// Per demand, the nodes with room for it, best first, as they are since the last refresh.
    nearest: HashMap<Vec<i64>, Nearest>,
    /// Per pair of pod sizes (positions in [`Holders`]' sizes: the pod given, the pod taken back),
    /// the swap partners with room for the difference, as they are since the last refresh: most
    /// nodes a sweep tries find no swap, and their pods come in few sizes.
    partners: HashMap<(usize, usize), Rc<Partners>>,
    /// The slots refreshed, with the change count at the time, in order, and each slot's last
    /// change count: after a search only these can have changed their answer for a class.
    refreshed: Vec<(u64, usize)>,
    refreshed_at: Vec<u64>,
    changes: u64,
}

/// At most this many of a search's best nodes are remembered: a search from a node that receives a
/// pod, or that skips the nodes a chain already uses, can then often take the next one.
const REMEMBERED: usize = 4;

/// At most this many nodes with room for a demand are kept for the searches of its classes: enough
/// for [`REMEMBERED`] after the node a pod leaves, the nodes a chain skips and the nodes that may not
/// take a class's pod (of another zone, or holding a pod it must not share a node with). On
/// upstream's benchmark at 20,000 pods, 16 left over a quarter of the searches reading every node;
/// 64 leave under a tenth.
const NEAREST: usize = 64;

/// The nodes with room for one demand, best first, and whether they are all such nodes.
struct Nearest {
    nodes: Vec<(f64, usize)>,
    all: bool,
}

/// A search for a node for one pod of a class, with no node skipped: the change count then, the
/// node it was made from (the one node it did not read), and the best nodes it found (room left,
/// node), best first. Unless `complete`, every other node it read either refused the pod or ranks
/// after the last of them; if `complete`, every other node it read refused the pod.
#[derive(Clone)]
struct Search {
    at: u64,
    from: usize,
    best: Vec<(f64, usize)>,
    complete: bool,
}

impl Receivers {
    fn new(solver: &Solver, new_slots: &[usize]) -> Self {
        let dims = solver.dims().len();
        let mut receivers = Receivers {
            free: vec![0; solver.slots().len() * dims],
            capacity: vec![0; solver.slots().len() * dims],
            holds_pods: vec![false; solver.slots().len()],
            dims,
            by_free: vec![],
            price: vec![(0.0, 0); solver.slots().len()],
            last: vec![None; solver.classes().len()],
            nearest: HashMap::new(),
            partners: HashMap::new(),
            refreshed: vec![],
            refreshed_at: vec![0; solver.slots().len()],
            changes: 0,
        };
        receivers.refresh(solver, new_slots);
        receivers.by_free = (0..dims)
            .map(|d| {
                let mut list: Vec<(i64, usize)> =
                    new_slots.iter().map(|&i| (receivers.free[i * dims + d], i)).collect();
                list.sort_unstable();
                list
            })
            .collect();
        // Searches start at change 1, after the copies above.
        receivers.changes = 1;
        receivers
    }

    /// Copies the free capacity of `slots` after they changed.
    fn refresh(&mut self, solver: &Solver, slots: &[usize]) {
        self.nearest.clear();
        self.partners.clear();
        for &i in slots {
            let slot = &solver.slots()[i];
            let free = &slot.state().free;
            for (d, list) in self.by_free.iter_mut().enumerate() {
                let (old, new) = (self.free[i * self.dims + d], free[d]);
                if old != new {
                    let at =
                        list.binary_search(&(old, i)).expect("a new slot is listed by its free capacity");
                    list.remove(at);
                    let to = list.binary_search(&(new, i)).unwrap_or_else(|to| to);
                    list.insert(to, (new, i));
                }
            }
            self.free[i * self.dims..(i + 1) * self.dims].copy_from_slice(free);
            let capacity = &mut self.capacity[i * self.dims..(i + 1) * self.dims];
            match slot.template() {
                Some(t) => capacity.copy_from_slice(&solver.templates()[t].capacity),
                None => capacity.fill(0),
            }
            self.holds_pods[i] = slot.template().is_some() && !slot.classes().is_empty();
            self.refreshed.push((self.changes, i));
            self.refreshed_at[i] = self.changes;
            let cheapest = slot.template().and_then(|t| solver.templates()[t].cheapest(slot.mask()));
            self.price[i] = cheapest.map_or((f64::INFINITY, 0), |(bit, offering)| (offering.price, 1 << bit));
        }
    }

    /// A move, trade or chain was made: nodes have more or less room than before.
    fn changed(&mut self) {
        self.changes += 1;
    }

    /// The new node, other than `from` and those in `skip`, that takes one pod of class `c` without
    /// a larger size, leaving the least room behind (so larger gaps stay open for larger pods); ties
    /// go to the lower index. A class that found none since the last change finds none now: a node
    /// refused with no node skipped is refused with some skipped too. (A search from another node
    /// may miss the node the failed one came from; the pass is the poorer for it, never wrong.)
    ///
    /// A node that has not changed since the class's last search answers as it did then (its room,
    /// size, offerings, price and pods are what they were; all refreshes of a change count come
    /// after its searches). So a later search reads only the nodes refreshed since, and the node
    /// that search was made from; of the others, none could take the pod if that search found
    /// none, and none beats the best it remembered that is unchanged and not excluded now. Only
    /// when every node it remembered is excluded or changed are all nodes read again. The answer
    /// is the one reading every node would give.
    fn find(&mut self, solver: &Solver, c: usize, from: usize, skip: &[usize]) -> Option<usize> {
        if let Some(Search { at, best, complete: true, .. }) = &self.last[c] {
            if *at == self.changes && best.is_empty() {
                return None;
            }
        }
        let known = self.last[c].as_ref().and_then(|last| self.since(solver, c, from, last));
        let mut search = known.unwrap_or_else(|| self.read_all(solver, c, from, &[]));
        let mut found = search.best.iter().find(|(_, b)| !skip.contains(b)).map(|&(_, b)| b);
        if found.is_none() && !search.complete {
            // Every node remembered is skipped, and nodes ranked after them are not known.
            if skip.is_empty() {
                search = self.read_all(solver, c, from, &[]);
                found = search.best.first().map(|&(_, b)| b);
            } else {
                found = self.read_all(solver, c, from, skip).best.first().map(|&(_, b)| b);
            }
        }
        debug_assert_eq!(
            found,
            self.read_every(solver, c, from, skip).best.first().map(|&(_, b)| b),
            "a search from what an earlier one remembered finds what reading every node finds"
        );
        if skip.is_empty() {
            self.last[c] = Some(search);
        }
        found
    }

    /// A search over every node with room for the pod, but `skip`. Which nodes have room for a pod,
    /// and how much each keeps, depend only on the pod's demand, not its class; so the best
    /// [`NEAREST`] of them for a demand are read once until a node changes, and a class asks only
    /// those whether they may take its pod. When they yield fewer than [`REMEMBERED`] and are not all
    /// the nodes with room, every node is read. Either way the best nodes found are those reading
    /// every node finds; a search that did not ask every node with room is not complete.
    fn read_all(&mut self, solver: &Solver, c: usize, from: usize, skip: &[usize]) -> Search {
        let demand = &solver.classes()[c].traits.demand;
        if !self.nearest.contains_key(demand.as_slice()) {
            let nearest = self.nearest_to(demand);
            self.nearest.insert(demand.clone(), nearest);
        }
        let nearest = &self.nearest[demand.as_slice()];
        let mut best = vec![];
        let mut unasked = false;
        for &(left, b) in &nearest.nodes {
            if b == from || skip.contains(&b) {
                continue;
            }
            if best.len() == REMEMBERED {
                unasked = true;
                break;
            }
            if self.may_take(solver, c, b) {
                best.push((left, b));
            }
        }
        if best.len() < REMEMBERED && !nearest.all {
            return self.read_every(solver, c, from, skip);
        }
        Search { at: self.changes, from, best, complete: nearest.all && !unasked }
    }

    /// The best [`NEAREST`] nodes with room for `demand` (by the room they keep, then index), and
    /// whether they are all the nodes with room.
    fn nearest_to(&self, demand: &[i64]) -> Nearest {
        let mut nodes: Vec<(f64, usize)> = Vec::with_capacity(NEAREST + 1);
        let mut all = true;
        for b in self.with_room(demand) {
            let Some(left) = self.room_after(demand, b) else { continue };
            let entry = (left, b);
            if nodes.len() == NEAREST && nodes.last().is_some_and(|&last| !ranks_before(entry, last)) {
                all = false;
                continue;
            }
            let at = nodes.partition_point(|&e| ranks_before(e, entry));
            nodes.insert(at, entry);
            if nodes.len() > NEAREST {
                nodes.pop();
                all = false;
            }
        }
        Nearest { nodes, all }
    }

    /// [`Receivers::read_all`] reading every node with room.
    fn read_every(&self, solver: &Solver, c: usize, from: usize, skip: &[usize]) -> Search {
        let candidates: Vec<usize> =
            self.with_room(&solver.classes()[c].traits.demand).filter(|b| !skip.contains(b)).collect();
        self.ranked(solver, c, from, &candidates, vec![], true)
    }

    /// What a search from `from` finds now, from the class's last search: its remembered nodes
    /// that have not changed since keep their rank, and only the nodes refreshed since and the one
    /// it did not read are read. None when nothing it remembered can be used (a full read is due).
    fn since(&self, solver: &Solver, c: usize, from: usize, last: &Search) -> Option<Search> {
        let unchanged: Vec<(f64, usize)> =
            last.best.iter().copied().filter(|&(_, b)| self.refreshed_at[b] < last.at && b != from).collect();
        if unchanged.is_empty() && !last.complete {
            return None;
        }
        let since = self.refreshed.partition_point(|&(change, _)| change < last.at);
        let candidates = self.refreshed_since(since, last.from);
        // No unchanged node is read again: it was not refreshed since, and a search never lists the
        // node it was made from.
        let mut search = self.ranked(solver, c, from, &candidates, unchanged, last.complete);
        if !last.complete {
            // Nodes not read rank after the old list's last, so nothing after it is certain.
            let bound = *last.best.last().expect("an incomplete search remembers its full list");
            search.best.retain(|&entry| !ranks_before(bound, entry));
            search.complete = false;
        }
        Some(search)
    }

    /// The nodes refreshed at `self.refreshed[since..]`, and `also`, ascending and each once (a
    /// node refreshed several times since is listed at its last refresh). A long list is marked
    /// and read in node order rather than sorted: late in a pass most nodes changed since a class's
    /// last search.
    fn refreshed_since(&self, since: usize, also: usize) -> Vec<usize> {
        let latest = self.refreshed[since..].iter().filter(|&&(change, b)| self.refreshed_at[b] == change);
        let nodes = self.refreshed_at.len();
        if (self.refreshed.len() - since) * 8 > nodes {
            let mut marked = vec![false; nodes];
            for &(_, b) in latest {
                marked[b] = true;
            }
            marked[also] = true;
            return (0..nodes).filter(|&b| marked[b]).collect();
        }
        let mut candidates: Vec<usize> = latest.map(|&(_, b)| b).collect();
        candidates.push(also);
        candidates.sort_unstable();
        candidates.dedup();
        candidates
    }

    /// Ranks `candidates` (distinct) together with `known` entries (nodes not among them),
    /// keeping the best [`REMEMBERED`]; complete when `all_known` says no node outside both could
    /// take the pod and no more than [`REMEMBERED`] can. A candidate with room that ranks after a
    /// full list is not asked whether it may take the pod (most of a long read are such): the
    /// search is then not known to be complete, which only makes a later search read more.
    fn ranked(
        &self,
        solver: &Solver,
        c: usize,
        from: usize,
        candidates: &[usize],
        known: Vec<(f64, usize)>,
        all_known: bool,
    ) -> Search {
        let mut best = known;
        best.sort_by(|&x, &y| order(x, y));
        best.truncate(REMEMBERED);
        let mut eligible = best.len();
        let mut unasked = false;
        let demand = &solver.classes()[c].traits.demand;
        for &b in candidates.iter().filter(|&&b| b != from) {
            let Some(left) = self.room_after(demand, b) else { continue };
            let entry = (left, b);
            if best.len() == REMEMBERED && best.last().is_some_and(|&last| !ranks_before(entry, last)) {
                unasked = true;
                continue;
            }
            if !self.may_take(solver, c, b) {
                continue;
            }
            eligible += 1;
            let at = best.partition_point(|&e| ranks_before(e, entry));
            best.insert(at, entry);
            best.truncate(REMEMBERED);
        }
        Search { at: self.changes, from, best, complete: all_known && !unasked && eligible <= REMEMBERED }
    }

    /// The free capacity of slot `b` as last refreshed.
    fn free_of(&self, b: usize) -> &[i64] {
        &self.free[b * self.dims..(b + 1) * self.dims]
    }

    /// The new slots with at least `demand` free in the dimension where fewest have.
    fn with_room(&self, demand: &[i64]) -> impl Iterator<Item = usize> + '_ {
        self.by_free
            .iter()
            .zip(demand)
            .map(|(list, &need)| &list[list.partition_point(|&(free, _)| free < need)..])
            .min_by_key(|tail| tail.len())
            .unwrap_or(&[])
            .iter()
            .map(|&(_, b)| b)
    }

    /// The room node `b` keeps after taking one pod of `demand`, if it has room for it at its size
    /// and holds pods. Whether it may take the pod is [`Receivers::may_take`]: together (and the
    /// node the pod leaves never taking it) they say what [`Receivers::find`] says.
    fn room_after(&self, demand: &[i64], b: usize) -> Option<f64> {
        let free = self.free_of(b);
        if !fits(demand, free) || !self.holds_pods[b] {
            return None;
        }
        Some(room_left(&self.capacity[b * self.dims..(b + 1) * self.dims], free, demand))
    }

    /// Whether node `b`, which has room for one pod of class `c`, may take it: its price does not
    /// rise, and its per-node counters and the pods on it admit the pod.
    fn may_take(&self, solver: &Solver, c: usize, b: usize) -> bool {
        let class = &solver.classes()[c];
        let slot = &solver.slots()[b];
        let Some(t) = slot.template() else { return false };
        // The pod's offerings may leave out the node's cheapest one.
        let mask = slot.mask() & class.masks[t];
        let (price, priced_at) = self.price[b];
        if mask == 0 || (mask & priced_at == 0 && solver.templates()[t].price(mask) > price + 1e-9) {
            return false;
        }
        slot.state().max_addable(&class.traits, 1, |_| false) > 0
            && slot.classes().iter().all(|&(other, _)| other == c || solver.pair_ok(other, c))
    }
}

/// Nodes by the room they keep, least first; ties go to the lower index.
fn order(x: (f64, usize), y: (f64, usize)) -> std::cmp::Ordering {
    x.0.partial_cmp(&y.0).unwrap_or(std::cmp::Ordering::Equal).then(x.1.cmp(&y.1))
}

/// Whether `x` ranks before `y`.
fn ranks_before(x: (f64, usize), y: (f64, usize)) -> bool {
    order(x, y) == std::cmp::Ordering::Less
}

/// The room a node of `capacity` keeps after taking `demand`, as the sum of its shares of the
/// node's capacity (so CPU and memory weigh alike).
fn room_left(capacity: &[i64], free: &[i64], demand: &[i64]) -> f64 {
    free.iter()
        .zip(demand)
        .zip(capacity)
        .filter(|(_, c)| **c > 0)
        .map(|((f, d), c)| (f - d) as f64 / *c as f64)
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
        if !node_fit::within_pool_limits(solver, t, chosen) {
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

/// `classes` (with counts) less one pod of each class in `leaving`, which the node holds.
fn without(classes: &[(usize, u64)], leaving: &[usize]) -> Vec<(usize, u64)> {
    let mut rest = classes.to_vec();
    for &c in leaving {
        let entry = rest.iter_mut().find(|(k, _)| *k == c).expect("a leaving pod is on the node");
        entry.1 -= 1;
    }
    rest.retain(|(_, n)| *n > 0);
    rest
}
