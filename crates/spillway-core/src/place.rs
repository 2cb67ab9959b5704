//! One placement for the scheduler and the scale-out estimate: where a gang's workers go inside one pool.
//!
//! Each worker goes to the slot with the fewest free GPUs that still holds it (best fit, so whole nodes stay free
//! for large gangs), workers may share a slot, and a gang is placed whole or not at all. The scheduler places onto
//! the cluster's index of ready nodes with free GPUs ([`ReadyGpus`]); the scale-out estimate places onto a
//! [`Fork`] of that same index, which adds the nodes still booting and the nodes it plans and keeps its edits to
//! itself. So the estimate counts a job on the nodes the scheduler would give it, and an estimate is a walk over
//! a view, never a copy of the cluster.

use crate::config::model_fits;
use crate::model::{Node, NodeId};
use std::collections::BTreeSet;

/// A place for workers: a ready node, a node still booting, or the n-th node an estimate plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    Ready(NodeId),
    Booting(NodeId),
    Planned(u32),
}

impl Slot {
    /// Returns the ready node this slot is, if it is one.
    pub(crate) fn ready(self) -> Option<NodeId> {
        match self {
            Slot::Ready(n) => Some(n),
            _ => None,
        }
    }
}

/// Free GPUs per slot, as a placement reads and edits them. Slots without free GPUs are not listed.
pub(crate) trait FreeGpus {
    /// Makes the index ready to be read (a fork lists its booting nodes on first use).
    fn prepare(&mut self) {}
    /// Returns the listed slot with the fewest free GPUs that has at least `g` of model `model` (ties: the
    /// lowest slot), with its free GPUs. Read only after [`FreeGpus::prepare`] ([`place`] calls both).
    fn best_fit(&self, g: u32, model: Option<&str>) -> Option<(u32, Slot)>;
    /// Changes the free GPUs of `slot` from `from` (as listed) to `to`.
    fn set(&mut self, slot: Slot, from: u32, to: u32);
}

/// Places `w` workers of `g` GPUs of `model` and lists in `taken` (cleared first; a buffer the caller keeps)
/// the slot each placed worker took, with its free GPUs before it: `w` entries when the gang fits, fewer when
/// it does not (the most that fit). `keep`: when the gang fits, `ix` keeps the GPUs taken; otherwise (and
/// always when it does not fit) `ix` is left as it was.
pub(crate) fn place(
    ix: &mut impl FreeGpus,
    g: u32,
    w: u32,
    model: Option<&str>,
    keep: bool,
    taken: &mut Vec<(Slot, u32)>,
) {
    // Jobs ask for at least one GPU per worker (submission checks it); a worker of none would fit anywhere.
    let g = g.max(1);
    ix.prepare();
    taken.clear();
    for _ in 0..w {
        let Some((f, slot)) = ix.best_fit(g, model) else { break };
        ix.set(slot, f, f - g);
        taken.push((slot, f));
    }
    if !(keep && taken.len() == w as usize) {
        // Undo in reverse, so each slot returns to the free GPUs it was listed with.
        for &(slot, f) in taken.iter().rev() {
            ix.set(slot, f - g, f);
        }
    }
}

/// A pool's ready nodes with free GPUs, by (free GPUs, node): the cluster's own index, edited in place.
/// `admit`, when set, says which nodes the job may use at all (a job inside its waiting budget: see
/// `budget_place`); others are passed over.
pub(crate) struct ReadyGpus<'c> {
    pub free: &'c mut BTreeSet<(u32, NodeId)>,
    pub nodes: &'c [Node],
    pub admit: Option<&'c dyn Fn(&Node) -> bool>,
}

impl FreeGpus for ReadyGpus<'_> {
    fn best_fit(&self, g: u32, model: Option<&str>) -> Option<(u32, Slot)> {
        let nodes = self.nodes;
        let admit = self.admit;
        let fits = |&&(_, n): &&(u32, NodeId)| {
            let node = &nodes[n.0 as usize];
            model_fits(model, &node.gpu_model) && admit.is_none_or(|a| a(node))
        };
        self.free.range((g, NodeId(0))..).find(fits).map(|&(f, n)| (f, Slot::Ready(n)))
    }

    fn set(&mut self, slot: Slot, from: u32, to: u32) {
        let Slot::Ready(n) = slot else { return };
        self.free.remove(&(from, n));
        if to > 0 {
            self.free.insert((to, n));
        }
    }
}

/// A pool's free GPUs as one scale-out estimate sees them: the cluster's index of ready nodes (read, never
/// edited), the nodes booting and the nodes planned, with the GPUs the jobs counted so far took. Among slots
/// with equal free GPUs, ready nodes come first (in the scheduler's order), then booting, then planned ones.
pub(crate) struct Fork<'c> {
    base: &'c BTreeSet<(u32, NodeId)>,
    nodes: &'c [Node],
    /// Entries of `base` this fork changed: their current free GPUs are in `own`.
    changed: BTreeSet<(u32, NodeId)>,
    /// Slots with free GPUs this fork keeps itself: booting and planned nodes, ready nodes it changed.
    own: BTreeSet<(u32, Slot)>,
    /// Slots [`Fork::hide`] and [`Fork::hide_unready`] took out, with their free GPUs then and whether the
    /// entry is `base`'s (else it was `own`'s).
    hidden: Vec<(u32, Slot, bool)>,
    /// GPU model of each planned slot.
    planned: Vec<&'c str>,
    /// The pool's nodes still booting, listed in `own` on first use (most estimates never place in most pools).
    booting: Option<&'c BTreeSet<NodeId>>,
}

impl<'c> Fork<'c> {
    /// Returns a fork of a pool's ready index `base` with its `booting` nodes added (all their GPUs free).
    pub(crate) fn new(base: &'c BTreeSet<(u32, NodeId)>, nodes: &'c [Node], booting: &'c BTreeSet<NodeId>) -> Fork<'c> {
        Fork {
            base,
            nodes,
            changed: BTreeSet::new(),
            own: BTreeSet::new(),
            hidden: Vec::new(),
            planned: Vec::new(),
            booting: Some(booting),
        }
    }

    /// Adds a planned node of `gpus` GPUs of `model`.
    pub(crate) fn plan(&mut self, gpus: u32, model: &'c str) {
        let slot = Slot::Planned(self.planned.len() as u32);
        self.planned.push(model);
        if gpus > 0 {
            self.own.insert((gpus, slot));
        }
    }

    /// Returns the most free GPUs on one node of the fork (ready, booting or planned).
    pub(crate) fn most_free(&mut self) -> u32 {
        self.prepare();
        let base = self.base.iter().rev().find(|e| !self.changed.contains(e)).map_or(0, |e| e.0);
        base.max(self.own.last().map_or(0, |e| e.0))
    }

    /// Takes ready node `n`'s free GPUs out of the fork (what the jobs counted so far left there); returns
    /// whether it had any.
    pub(crate) fn hide(&mut self, n: NodeId) -> bool {
        let Some(node) = self.nodes.get(n.0 as usize) else { return false };
        let entry = (node.free(), n);
        if self.base.contains(&entry) && !self.changed.contains(&entry) {
            self.hidden.push((entry.0, Slot::Ready(n), true));
            return self.changed.insert(entry);
        }
        match self.own.iter().find(|&&(_, s)| s == Slot::Ready(n)).copied() {
            Some(own) => self.hide_own(own),
            None => false,
        }
    }

    /// Takes a booting or planned `slot` with `free` GPUs (as listed now) out of the fork; returns whether it
    /// was listed so. Ready nodes go through [`Fork::hide`].
    pub(crate) fn hide_unready(&mut self, slot: Slot, free: u32) -> bool {
        slot.ready().is_none() && self.hide_own((free, slot))
    }

    fn hide_own(&mut self, entry: (u32, Slot)) -> bool {
        let listed = self.own.remove(&entry);
        if listed {
            self.hidden.push((entry.0, entry.1, false));
        }
        listed
    }

    /// Puts back what [`Fork::hide`] and [`Fork::hide_unready`] took out, as it was then (nothing places on a
    /// hidden slot).
    pub(crate) fn unhide(&mut self) {
        for (free, slot, in_base) in std::mem::take(&mut self.hidden) {
            match (in_base, slot) {
                (true, Slot::Ready(n)) => {
                    self.changed.remove(&(free, n));
                }
                _ => {
                    self.own.insert((free, slot));
                }
            }
        }
    }

    fn model(&self, slot: Slot) -> &str {
        match slot {
            Slot::Ready(n) | Slot::Booting(n) => &self.nodes[n.0 as usize].gpu_model,
            Slot::Planned(i) => self.planned.get(i as usize).copied().unwrap_or(""),
        }
    }
}

impl FreeGpus for Fork<'_> {
    fn prepare(&mut self) {
        if let Some(booting) = self.booting.take() {
            let nodes = self.nodes;
            let listed = booting.iter().map(|&n| (nodes[n.0 as usize].gpus, Slot::Booting(n)));
            self.own.extend(listed.filter(|&(g, _)| g > 0));
        }
    }

    fn best_fit(&self, g: u32, model: Option<&str>) -> Option<(u32, Slot)> {
        let nodes = self.nodes;
        let from_base = self
            .base
            .range((g, NodeId(0))..)
            .filter(|e| !self.changed.contains(e))
            .find(|&&(_, n)| model_fits(model, &nodes[n.0 as usize].gpu_model))
            .map(|&(f, n)| (f, Slot::Ready(n)));
        let from_own =
            self.own.range((g, Slot::Ready(NodeId(0)))..).find(|&&(_, s)| model_fits(model, self.model(s))).copied();
        match (from_base, from_own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn set(&mut self, slot: Slot, from: u32, to: u32) {
        let in_base = |n: NodeId| self.base.contains(&(from, n)) && !self.changed.contains(&(from, n));
        match slot {
            Slot::Ready(n) if in_base(n) => {
                self.changed.insert((from, n));
            }
            _ => {
                self.own.remove(&(from, slot));
            }
        }
        if to > 0 {
            self.own.insert((to, slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(ix: &mut impl FreeGpus, g: u32, w: u32, model: Option<&str>, keep: bool) -> Vec<(Slot, u32)> {
        let mut taken = Vec::new();
        super::place(ix, g, w, model, keep, &mut taken);
        taken
    }
    use crate::config::Market;
    use crate::model::NodeState;

    fn node(id: u32, gpus: u32, used: u32, model: &str) -> Node {
        Node {
            id: NodeId(id),
            pool: 0,
            market: Market::OnDemand,
            instance_type: None,
            gpu_model: model.into(),
            gpus,
            used,
            jobs: Vec::new(),
            state: NodeState::Ready,
            price_usd_per_hour: 1.0,
            requested_at: 0,
            billed_from: 0,
            ready_at: Some(0),
            ended_at: None,
            idle_since: None,
            gpu_utilization: None,
            protected: false,
            at_risk: false,
            interrupted: false,
            held: None,
        }
    }

    fn index(nodes: &[Node]) -> BTreeSet<(u32, NodeId)> {
        nodes.iter().filter(|n| n.state == NodeState::Ready && n.free() > 0).map(|n| (n.free(), n.id)).collect()
    }

    #[test]
    fn each_worker_takes_the_fullest_node_that_holds_it() {
        let nodes = vec![node(0, 8, 0, "a100"), node(1, 8, 6, "a100"), node(2, 8, 4, "a100")];
        let mut free = index(&nodes);
        let got = place(&mut ReadyGpus { free: &mut free, nodes: &nodes, admit: None }, 2, 3, None, false);
        // 2 free on node 1, then 4 on node 2 (twice), never the empty node 0.
        let slots: Vec<Slot> = got.iter().map(|&(s, _)| s).collect();
        assert_eq!(slots, vec![Slot::Ready(NodeId(1)), Slot::Ready(NodeId(2)), Slot::Ready(NodeId(2))]);
        assert_eq!(free, index(&nodes), "a placement without keep leaves the index as it was");
    }

    #[test]
    fn a_gang_that_does_not_fit_takes_nothing_and_says_how_many_fit() {
        let nodes = vec![node(0, 8, 0, "a100"), node(1, 8, 0, "h100")];
        let mut free = index(&nodes);
        let got = place(&mut ReadyGpus { free: &mut free, nodes: &nodes, admit: None }, 8, 2, Some("a100"), true);
        assert_eq!(got.len(), 1);
        assert_eq!(free, index(&nodes));
    }

    #[test]
    fn a_fork_sees_booting_and_planned_nodes_and_leaves_the_cluster_alone() {
        let nodes = vec![node(0, 8, 6, "a100"), node(1, 8, 8, "a100"), node(2, 4, 0, "a100")];
        let mut base = index(&nodes);
        base.remove(&(4, NodeId(2)));
        let before = base.clone();
        let booting = BTreeSet::from([NodeId(2)]);
        let mut fork = Fork::new(&base, &nodes, &booting);
        let got = place(&mut fork, 2, 3, None, true);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, Slot::Ready(NodeId(0)));
        assert_eq!(got[1].0, Slot::Booting(NodeId(2)));
        // The ready node is full in the fork; one more worker needs a planned node.
        assert_eq!(place(&mut fork, 2, 2, None, true).len(), 0);
        fork.plan(8, "a100");
        let got = place(&mut fork, 2, 2, None, true);
        assert_eq!(got.iter().map(|&(s, _)| s).collect::<Vec<_>>(), vec![Slot::Planned(0); 2]);
        assert_eq!(base, before);
    }

    #[test]
    fn hidden_slots_take_no_worker_until_put_back_as_they_were() {
        let nodes = vec![node(0, 8, 2, "a100"), node(1, 8, 0, "a100")];
        let mut base = index(&nodes);
        base.remove(&(8, NodeId(1)));
        let booting = BTreeSet::from([NodeId(1)]);
        let mut fork = Fork::new(&base, &nodes, &booting);
        fork.plan(8, "a100");
        let before = {
            fork.prepare();
            view(&fork)
        };
        assert!(fork.hide(NodeId(0)));
        assert!(fork.hide_unready(Slot::Booting(NodeId(1)), 8));
        assert!(fork.hide_unready(Slot::Planned(0), 8));
        // Listed no more (a second hide finds nothing), and a ready node goes through `hide` only.
        assert!(!fork.hide_unready(Slot::Planned(0), 8));
        assert!(!fork.hide_unready(Slot::Ready(NodeId(0)), 6));
        assert_eq!(place(&mut fork, 1, 1, None, true).len(), 0);
        fork.unhide();
        assert_eq!(view(&fork), before);
    }

    /// Returns what a fork lists: (free GPUs, slot) for every slot with free GPUs.
    fn view(f: &Fork<'_>) -> BTreeSet<(u32, Slot)> {
        let base = f.base.iter().filter(|e| !f.changed.contains(e)).map(|&(g, n)| (g, Slot::Ready(n)));
        base.chain(f.own.iter().copied()).collect()
    }

    #[test]
    fn a_fork_and_the_cluster_index_agree_through_fits_misses_and_undos() {
        // A seeded walk of placements that fit, partly fit (and are undone) and are not kept: after each, the
        // fork lists exactly what the cluster's own index holds, and both chose the same slots.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..50 {
            let nodes: Vec<Node> =
                (0..8).map(|i| node(i, 8, next(9) as u32, if next(3) == 0 { "h100" } else { "a100" })).collect();
            let mut real = index(&nodes);
            let base = real.clone();
            let none = BTreeSet::new();
            let mut fork = Fork::new(&base, &nodes, &none);
            for _ in 0..12 {
                let (g, w, keep) = (1 + next(8) as u32, 1 + next(4) as u32, next(3) > 0);
                let model = [None, Some("a100"), Some("h100")][next(3) as usize];
                let a = place(&mut ReadyGpus { free: &mut real, nodes: &nodes, admit: None }, g, w, model, keep);
                let b = place(&mut fork, g, w, model, keep);
                assert_eq!(a, b, "g={g} w={w} model={model:?} keep={keep}");
                let listed: BTreeSet<(u32, Slot)> = real.iter().map(|&(g, n)| (g, Slot::Ready(n))).collect();
                assert_eq!(view(&fork), listed);
            }
            assert_eq!(base, index(&nodes), "the fork never edits the index it reads");
        }
    }

    #[test]
    fn a_gang_that_partly_fits_on_a_touched_node_is_undone_and_placed_again() {
        let nodes = vec![node(0, 8, 0, "a100"), node(1, 8, 0, "a100")];
        let base = index(&nodes);
        let none = BTreeSet::new();
        let mut fork = Fork::new(&base, &nodes, &none);
        // Takes 6 of node 0 (now 2 free, listed by the fork itself), then a gang of three 4-GPU workers finds
        // only node 1 twice: undone, node 0 keeps its 2 and node 1 its 8.
        assert_eq!(place(&mut fork, 6, 1, None, true).len(), 1);
        assert_eq!(place(&mut fork, 4, 3, None, true).len(), 2);
        let expect = BTreeSet::from([(2, Slot::Ready(NodeId(0))), (8, Slot::Ready(NodeId(1)))]);
        assert_eq!(view(&fork), expect);
        // Node 0 again: its 2 free GPUs, from the fork's own list.
        assert_eq!(place(&mut fork, 2, 1, None, true), vec![(Slot::Ready(NodeId(0)), 2)]);
        assert_eq!(view(&fork), BTreeSet::from([(8, Slot::Ready(NodeId(1)))]));
    }

    #[test]
    fn booting_and_planned_slots_keep_their_model() {
        let nodes = vec![node(0, 8, 8, "a100"), node(1, 8, 0, "h100")];
        let mut base = index(&nodes);
        // Node 1 is still booting: not in the ready index.
        base.remove(&(8, NodeId(1)));
        let booting = BTreeSet::from([NodeId(1)]);
        let mut fork = Fork::new(&base, &nodes, &booting);
        assert!(place(&mut fork, 1, 1, Some("a100"), true).is_empty(), "the booting node is an h100");
        fork.plan(8, "a100");
        assert_eq!(place(&mut fork, 1, 1, Some("a100"), true)[0].0, Slot::Planned(0));
        assert_eq!(place(&mut fork, 1, 1, Some("h100"), true)[0].0, Slot::Booting(NodeId(1)));
    }

    #[test]
    fn a_fork_places_as_the_scheduler_would_on_the_same_nodes() {
        // Same nodes, same jobs: the fork's choices equal those of the cluster's own index.
        let nodes: Vec<Node> =
            (0..12).map(|i| node(i, 8, (i * 3) % 9, if i % 4 == 0 { "h100" } else { "a100" })).collect();
        let mut real = index(&nodes);
        let base = real.clone();
        let none = BTreeSet::new();
        let mut fork = Fork::new(&base, &nodes, &none);
        for (g, w, m) in [(1, 3, None), (4, 2, Some("a100")), (2, 5, None), (8, 1, Some("h100")), (3, 2, None)] {
            let a = place(&mut ReadyGpus { free: &mut real, nodes: &nodes, admit: None }, g, w, m, true);
            let b = place(&mut fork, g, w, m, true);
            assert_eq!(a, b, "g={g} w={w}");
        }
    }
}
