//! The job queue: per tier, per team, ordered by submission. [`Queue::cursor`] walks it in scheduling order:
//! tiers by priority; within a tier, the team with the lowest weighted share of GPUs goes next (fair share),
//! then the oldest job of that team.

use crate::model::JobId;
use crate::time::Time;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// What a scheduling pass reads of a job known to wait inside its waiting budget (see [`Queue::wait_in_budget`]),
/// so that it need not read the job: none of it changes while the job waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Noted {
    /// When its budget ends.
    pub until: Time,
    pub tier: usize,
    /// When it entered the queue (its preemption comes due from then).
    pub queued_since: Time,
    /// How long it is expected to run, where it declared it (otherwise its team's run times say, which change).
    pub run: Option<Time>,
    /// Its gang: kind (see [`Queue::kind`]), GPUs per worker, workers.
    pub kind: u32,
    pub per_worker: u32,
    pub workers: u32,
    /// Whether it may run on spot (its access is spot and on-demand, or on-demand alone).
    pub spot: bool,
    /// Its tier bursts early (`burst_early`): it stops waiting once owned capacity could not take it before its
    /// budget ends, which changes with every start and end on owned nodes, so every pass asks, and it is counted
    /// among the jobs a pass must look at.
    pub early: bool,
}

/// Queued jobs, per tier (by priority index) and team.
#[derive(Debug, Default, Clone)]
pub struct Queue {
    tiers: Vec<BTreeMap<usize, BTreeSet<(Time, JobId)>>>,
    len: usize,
    /// GPUs each job needs in all, indexed by job id; the cursor adds them to a team's share as it passes.
    gpus: Vec<u32>,
    /// Per job id: its kind (GPUs per worker and GPU model, interned in `kind_list`).
    kind_of: Vec<u32>,
    kind_ids: BTreeMap<(u32, Option<String>), u32>,
    kind_list: Vec<(u32, Option<String>)>,
    /// Per tier: queued jobs per kind.
    kinds: Vec<BTreeMap<u32, usize>>,
    /// Per job id: whether it was queued as one a pass must look at even where it can neither start nor buy
    /// (see [`Queue::push`]).
    timed_of: Vec<bool>,
    /// Per tier: how many such jobs are queued.
    timed: Vec<usize>,
    /// Jobs known to wait inside their waiting budgets (see [`Queue::wait_in_budget`]): per job id, what a pass
    /// reads of it; the same by budget end; and per tier, how many, in all and per kind.
    in_budget_of: Vec<Option<Noted>>,
    budget_ends: BTreeSet<(Time, JobId)>,
    in_budget: Vec<usize>,
    in_budget_kinds: Vec<BTreeMap<u32, usize>>,
    /// Per tier: every noted job (`burst_early` ones too), in all and by kind and expected run (0 where the job
    /// declared none); and the `burst_early` ones by kind, workers, spot and budget end.
    noted_count: Vec<usize>,
    in_budget_runs: Vec<BTreeMap<(u32, Time), usize>>,
    early_ends: Vec<BTreeMap<(u32, u32, bool, Time), usize>>,
}

impl Queue {
    /// Returns an empty queue for `tiers` tiers.
    pub fn new(tiers: usize) -> Queue {
        Queue {
            tiers: vec![BTreeMap::new(); tiers],
            len: 0,
            gpus: Vec::new(),
            kind_of: Vec::new(),
            kind_ids: BTreeMap::new(),
            kind_list: Vec::new(),
            kinds: vec![BTreeMap::new(); tiers],
            timed_of: Vec::new(),
            timed: vec![0; tiers],
            in_budget_of: Vec::new(),
            budget_ends: BTreeSet::new(),
            in_budget: vec![0; tiers],
            in_budget_kinds: vec![BTreeMap::new(); tiers],
            noted_count: vec![0; tiers],
            in_budget_runs: vec![BTreeMap::new(); tiers],
            early_ends: vec![BTreeMap::new(); tiers],
        }
    }

    /// Returns the number this queue gives jobs of `per_worker` GPUs per worker of `model`: equal numbers,
    /// equal needs (numbered in the order kinds are first seen).
    pub fn kind(&mut self, per_worker: u32, model: Option<&str>) -> u32 {
        let key = (per_worker, model.map(str::to_string));
        let next = self.kind_list.len() as u32;
        let kind = *self.kind_ids.entry(key.clone()).or_insert(next);
        if kind == next {
            self.kind_list.push(key);
        }
        kind
    }

    /// Records how many GPUs job `job` needs in all, and its kind (see [`Queue::kind`]), once, when it is
    /// submitted.
    pub fn register(&mut self, job: JobId, gpus: u32, kind: u32) {
        let i = job.0 as usize;
        if self.gpus.len() <= i {
            self.gpus.resize(i + 1, 0);
            self.kind_of.resize(i + 1, 0);
        }
        self.gpus[i] = gpus;
        self.kind_of[i] = kind;
    }

    /// Returns the kinds (GPUs per worker, GPU model) of the jobs queued in `tier`.
    pub fn kinds(&self, tier: usize) -> impl Iterator<Item = (u32, Option<&str>)> + '_ {
        self.kinds[tier].keys().map(|&k| (self.kind_list[k as usize].0, self.kind_list[k as usize].1.as_deref()))
    }

    /// Returns the kinds of the jobs queued in `tier` that a pass must look at once nothing further on can start
    /// (all but those known to wait inside their budgets, see [`Queue::wait_in_budget`]).
    pub(crate) fn kinds_to_visit(&self, tier: usize) -> impl Iterator<Item = (u32, Option<&str>)> + '_ {
        let waiting = &self.in_budget_kinds[tier];
        let more = move |(k, n): (&u32, &usize)| (waiting.get(k).copied().unwrap_or(0) < *n).then_some(*k);
        self.kinds[tier]
            .iter()
            .filter_map(more)
            .map(|k| (self.kind_list[k as usize].0, self.kind_list[k as usize].1.as_deref()))
    }

    fn count_kind(&mut self, tier: usize, job: JobId, delta: isize) {
        let kind = self.kind_of.get(job.0 as usize).copied().unwrap_or(0);
        count(&mut self.kinds[tier], kind, delta);
    }

    /// Notes that queued job `job` waits inside its waiting budget for owned capacity until `noted.until`, and that
    /// nothing but capacity it could start on, its team's quota or the end of its budget changes that: a pass need
    /// not read it to leave it waiting, and past the point where no job could start or preempt it need not look at
    /// it at all (see `schedule`). Called again, it moves the end; [`Queue::expire_budgets`] and
    /// [`Queue::remove`] forget it.
    pub(crate) fn wait_in_budget(&mut self, job: JobId, noted: Noted) {
        let i = job.0 as usize;
        if self.in_budget_of.len() <= i {
            self.in_budget_of.resize(i + 1, None);
        }
        match self.in_budget_of[i] {
            Some(old) if old == noted => return,
            Some(old) => {
                self.budget_ends.remove(&(old.until, job));
                self.count_noted(job, &old, -1);
            }
            None => {}
        }
        self.count_noted(job, &noted, 1);
        self.in_budget_of[i] = Some(noted);
        self.budget_ends.insert((noted.until, job));
    }

    /// Forgets that `job` waits inside its budget (see [`Queue::wait_in_budget`]), if it was noted.
    pub(crate) fn leave_budget(&mut self, job: JobId) {
        let Some(noted) = self.in_budget_of.get_mut(job.0 as usize).and_then(Option::take) else { return };
        self.budget_ends.remove(&(noted.until, job));
        self.count_noted(job, &noted, -1);
    }

    /// Adds noted job `job` to the counts of jobs waiting inside their budgets (`delta` 1), or takes it off them
    /// (-1); a `burst_early` one is not on the counts of jobs a pass need not look at.
    fn count_noted(&mut self, job: JobId, noted: &Noted, delta: isize) {
        let tier = noted.tier;
        let kind = self.kind_of.get(job.0 as usize).copied().unwrap_or(0);
        self.noted_count[tier] = self.noted_count[tier].saturating_add_signed(delta);
        count(&mut self.in_budget_runs[tier], (kind, noted.run.unwrap_or(0)), delta);
        if noted.early {
            count(&mut self.early_ends[tier], (kind, noted.workers, noted.spot, noted.until), delta);
        } else {
            self.in_budget[tier] = self.in_budget[tier].saturating_add_signed(delta);
            count(&mut self.in_budget_kinds[tier], kind, delta);
        }
    }

    /// Returns how many jobs queued in `tier` are not noted at all (not even as `burst_early` ones).
    pub(crate) fn unnoted(&self, tier: usize) -> usize {
        self.tier_len(tier).saturating_sub(self.noted_count[tier])
    }

    /// Returns, per (kind, workers, spot) of the `burst_early` jobs of `tier` known to wait inside their budgets,
    /// the earliest end of their budgets.
    pub(crate) fn early_ends(&self, tier: usize) -> impl Iterator<Item = (u32, u32, bool, Time)> + '_ {
        let ends = &self.early_ends[tier];
        let mut from = Some((0u32, 0u32, false, Time::MIN));
        std::iter::from_fn(move || {
            let (&(kind, workers, spot, until), _) = ends.range(from?..).next()?;
            from = match (spot, workers.checked_add(1), kind.checked_add(1)) {
                (false, _, _) => Some((kind, workers, true, Time::MIN)),
                (true, Some(w), _) => Some((kind, w, false, Time::MIN)),
                (true, None, Some(k)) => Some((k, 0, false, Time::MIN)),
                (true, None, None) => None,
            };
            Some((kind, workers, spot, until))
        })
    }

    /// Returns, per kind of the jobs of `tier` known to wait inside their budgets (`burst_early` ones too), its
    /// GPUs per worker and the shortest expected run among them (0 where one declared none).
    pub(crate) fn noted_kinds(&self, tier: usize) -> impl Iterator<Item = (u32, Time)> + '_ {
        let runs = &self.in_budget_runs[tier];
        let mut from = Some((0u32, Time::MIN));
        std::iter::from_fn(move || {
            let (&(kind, run), _) = runs.range(from?..).next()?;
            from = kind.checked_add(1).map(|k| (k, Time::MIN));
            Some((self.kind_gpus(kind), run))
        })
    }

    /// Forgets the jobs whose budgets end at `now` or before.
    pub(crate) fn expire_budgets(&mut self, now: Time) {
        while let Some(&(_, job)) = self.budget_ends.first().filter(|(until, _)| *until <= now) {
            self.leave_budget(job);
        }
    }

    /// Returns what was noted of `job`, where it is known to wait inside its budget (see
    /// [`Queue::wait_in_budget`]).
    pub(crate) fn noted(&self, job: JobId) -> Option<&Noted> {
        self.in_budget_of.get(job.0 as usize).and_then(Option::as_ref)
    }

    /// Returns the GPU model jobs of `kind` (see [`Queue::kind`]) ask for, if any.
    pub(crate) fn kind_model(&self, kind: u32) -> Option<&str> {
        self.kind_list.get(kind as usize).and_then(|(_, m)| m.as_deref())
    }

    /// Returns the GPUs per worker of jobs of `kind` (see [`Queue::kind`]).
    pub(crate) fn kind_gpus(&self, kind: u32) -> u32 {
        self.kind_list.get(kind as usize).map_or(0, |(g, _)| *g)
    }

    /// Returns how many jobs queued in `tier` are not noted as waiting inside their budgets (a `burst_early` one
    /// counts as not noted: a pass looks at it).
    pub(crate) fn to_visit(&self, tier: usize) -> usize {
        self.tier_len(tier) - self.in_budget[tier]
    }

    /// Adds a job; `key` is its original submission time, so a requeued job keeps its place. `timed`: the job
    /// has decisions of its own that come with time alone (a deadline pin, access back to on-demand after a move
    /// to spot) or tries pools in an order of its own (its data may move), so a pass looks at it even where no job
    /// of its tier can start or buy.
    pub fn push(&mut self, tier: usize, team: usize, key: Time, job: JobId, timed: bool) {
        if self.tiers[tier].entry(team).or_default().insert((key, job)) {
            self.len += 1;
            self.count_kind(tier, job, 1);
            let i = job.0 as usize;
            if self.timed_of.len() <= i {
                self.timed_of.resize(i + 1, false);
            }
            self.timed_of[i] = timed;
            self.timed[tier] += usize::from(timed);
        }
    }

    /// Returns whether job `job` was queued as timed (see [`Queue::push`]).
    pub fn is_timed(&self, job: JobId) -> bool {
        self.timed_of.get(job.0 as usize).copied().unwrap_or(false)
    }

    /// Returns whether a timed job (see [`Queue::push`]) is queued in `tier` or a later one.
    pub fn timed_from(&self, tier: usize) -> bool {
        self.timed.iter().skip(tier).any(|&n| n > 0)
    }

    /// Removes a job; returns whether it was queued.
    pub fn remove(&mut self, tier: usize, team: usize, key: Time, job: JobId) -> bool {
        let Some(set) = self.tiers[tier].get_mut(&team) else { return false };
        let removed = set.remove(&(key, job));
        if set.is_empty() {
            self.tiers[tier].remove(&team);
        }
        if removed {
            self.leave_budget(job);
            self.len -= 1;
            self.count_kind(tier, job, -1);
            self.timed[tier] -= usize::from(self.is_timed(job));
        }
        removed
    }

    /// Returns the number of queued jobs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Returns whether no job is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns whether some tier has queued jobs of more than one team (only then does fair share order them).
    pub fn teams_interleave(&self) -> bool {
        self.tiers.iter().any(|t| t.len() > 1)
    }

    /// Returns the number of queued jobs of `tier`.
    pub fn tier_len(&self, tier: usize) -> usize {
        self.tiers[tier].values().map(BTreeSet::len).sum()
    }

    /// Returns a cursor in scheduling order. `shares[team]` is the team's current share (GPUs in use divided by
    /// weight); each job the cursor passes adds its GPUs / weight to its team's share, so teams interleave.
    pub fn cursor(&self, shares: Vec<f64>, weights: Vec<f64>) -> Cursor<'_> {
        Cursor {
            queue: self,
            tier: 0,
            heap: BinaryHeap::new(),
            iters: Vec::new(),
            shares,
            weights,
            gpus: &self.gpus,
            started: false,
            team: 0,
        }
    }
}

/// Fair-share order key: lower share first, then older head job, then team index.
type HeapKey = Reverse<(u64, Time, usize)>;

/// Where a cursor is in one team's queue of a tier.
type TeamIter<'a> = std::iter::Peekable<std::collections::btree_set::Iter<'a, (Time, JobId)>>;

/// Walks the queue in scheduling order without copying it.
pub struct Cursor<'a> {
    queue: &'a Queue,
    tier: usize,
    heap: BinaryHeap<HeapKey>,
    /// Per team index: where the cursor is in its queue of the current tier.
    iters: Vec<Option<TeamIter<'a>>>,
    shares: Vec<f64>,
    weights: Vec<f64>,
    gpus: &'a [u32],
    started: bool,
    /// The team of the job returned last.
    team: usize,
}

impl Cursor<'_> {
    fn load_tier(&mut self) {
        self.heap.clear();
        self.iters.clear();
        for (&team, set) in &self.queue.tiers[self.tier] {
            let mut it = set.iter().peekable();
            if let Some(&&(t, _)) = it.peek() {
                self.heap.push(Reverse((share_key(self.shares.get(team).copied().unwrap_or(0.0)), t, team)));
                if self.iters.len() <= team {
                    self.iters.resize_with(team + 1, || None);
                }
                self.iters[team] = Some(it);
            }
        }
    }

    /// Returns the tier index of the job the cursor returned last.
    pub fn tier(&self) -> usize {
        self.tier
    }

    /// Returns the team of the job the cursor returned last.
    pub fn team(&self) -> usize {
        self.team
    }

    /// Returns how many jobs of the current tier the cursor has not returned yet.
    pub(crate) fn left_in_tier(&self) -> usize {
        self.iters.iter().flatten().map(ExactSizeIterator::len).sum()
    }
}

/// Adds `delta` to kind `kind`'s count in `counts`, dropping kinds that reach 0.
fn count<K: Ord + Copy>(counts: &mut BTreeMap<K, usize>, kind: K, delta: isize) {
    let n = counts.entry(kind).or_insert(0);
    *n = n.saturating_add_signed(delta);
    if *n == 0 {
        counts.remove(&kind);
    }
}

fn share_key(share: f64) -> u64 {
    (share.max(0.0) * 1_000_000.0) as u64
}

impl Iterator for Cursor<'_> {
    type Item = JobId;

    fn next(&mut self) -> Option<JobId> {
        if !self.started {
            self.started = true;
            if self.queue.tiers.is_empty() {
                return None;
            }
            self.load_tier();
        }
        loop {
            // The team whose turn it is stays at the top of the heap with its new key when it has more jobs
            // (one sift instead of a pop and a push).
            if let Some(mut top) = self.heap.peek_mut() {
                let Reverse((_, _, team)) = *top;
                let it = self.iters.get_mut(team)?.as_mut()?;
                let &(_, job) = it.next()?;
                let g = self.gpus.get(job.0 as usize).copied().unwrap_or(1);
                self.team = team;
                // Divided, not multiplied by 1 / weight: the two differ in the last bit for some weights, and the
                // share key truncates, so that bit can reorder teams.
                let w = self.weights.get(team).copied().unwrap_or(1.0).max(1e-9);
                if let Some(s) = self.shares.get_mut(team) {
                    *s += f64::from(g) / w;
                }
                match it.peek() {
                    Some(&&(t, _)) => {
                        let s = self.shares.get(team).copied().unwrap_or(0.0);
                        *top = Reverse((share_key(s), t, team));
                    }
                    None => {
                        std::collections::binary_heap::PeekMut::pop(top);
                    }
                }
                return Some(job);
            }
            self.tier += 1;
            if self.tier >= self.queue.tiers.len() {
                return None;
            }
            self.load_tier();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_grows_by_gpus_divided_by_weight_exactly() {
        // Weight 3 after three 7-GPU jobs: 7/3 added three times is 7.0 exactly; 7 x (1/3) added three times is
        // 6.999999999999999, whose truncated key would put team 0 ahead of team 1 at 7.0.
        let mut q = Queue::new(1);
        for i in 0..4 {
            q.register(JobId(i), 7, 0);
            q.push(0, 0, 10 + i as Time, JobId(i), false);
        }
        q.register(JobId(9), 1, 0);
        q.push(0, 1, 0, JobId(9), false);
        // At equal shares (7.0 each) the older head job goes first: team 1's.
        let order: Vec<_> = q.cursor(vec![0.0, 7.0], vec![3.0, 1.0]).collect();
        assert_eq!(order, vec![JobId(0), JobId(1), JobId(2), JobId(9), JobId(3)]);
    }

    #[test]
    fn higher_tiers_come_first_then_age() {
        let mut q = Queue::new(2);
        (0..3).for_each(|i| q.register(JobId(i), 1, 0));
        q.push(1, 0, 0, JobId(0), false);
        q.push(0, 0, 50, JobId(1), false);
        q.push(0, 0, 10, JobId(2), false);
        let order: Vec<_> = q.cursor(vec![0.0], vec![1.0]).collect();
        assert_eq!(order, vec![JobId(2), JobId(1), JobId(0)]);
    }

    #[test]
    fn a_team_over_its_share_waits_behind_a_team_under_it() {
        let mut q = Queue::new(1);
        (0..3).for_each(|i| q.register(JobId(i), 1, 0));
        q.push(0, 0, 0, JobId(0), false);
        q.push(0, 0, 1, JobId(1), false);
        q.push(0, 1, 5, JobId(2), false);
        // team 0 already holds 8 GPUs, team 1 none: team 1's job goes first despite being younger.
        let order: Vec<_> = q.cursor(vec![8.0, 0.0], vec![1.0, 1.0]).collect();
        assert_eq!(order, vec![JobId(2), JobId(0), JobId(1)]);
    }

    #[test]
    fn timed_jobs_are_counted_per_tier_until_they_leave() {
        let mut q = Queue::new(3);
        (0..3).for_each(|i| q.register(JobId(i), 1, 0));
        q.push(1, 0, 0, JobId(0), true);
        q.push(2, 0, 0, JobId(1), false);
        q.push(2, 0, 1, JobId(2), false);
        assert!(q.timed_from(0) && q.timed_from(1) && !q.timed_from(2));
        assert!(q.is_timed(JobId(0)) && !q.is_timed(JobId(1)));
        // Pushed again while queued, it is counted once.
        q.push(1, 0, 0, JobId(0), true);
        assert!(q.remove(1, 0, 0, JobId(0)));
        assert!(!q.timed_from(0));
        // Requeued as timed, the same id counts again; as plain, it does not.
        q.push(2, 0, 5, JobId(0), true);
        assert!(q.timed_from(2));
        assert!(q.remove(2, 0, 5, JobId(0)));
        q.push(2, 0, 5, JobId(0), false);
        assert!(!q.timed_from(0));
    }

    #[test]
    fn jobs_waiting_inside_their_budgets_are_counted_until_their_budgets_end_or_they_leave() {
        let mut q = Queue::new(2);
        let (small, large) = (q.kind(1, None), q.kind(8, None));
        for (i, kind) in [small, small, large].into_iter().enumerate() {
            q.register(JobId(i as u32), 1, kind);
            q.push(1, 0, i as Time, JobId(i as u32), false);
        }
        let noted = |until: Time| Noted {
            until,
            tier: 1,
            queued_since: 0,
            run: Some(60_000),
            kind: 0,
            per_worker: 1,
            workers: 1,
            spot: false,
            early: false,
        };
        q.wait_in_budget(JobId(0), noted(100));
        q.wait_in_budget(JobId(2), noted(50));
        assert_eq!((q.to_visit(0), q.to_visit(1)), (0, 1));
        // Job 1 is of the small kind and not noted: the small kind is still to visit, the large one is not.
        assert_eq!(q.kinds_to_visit(1).collect::<Vec<_>>(), vec![(1, None)]);
        // Its budget moved: counted once, and forgotten at its new end, not its old one.
        q.wait_in_budget(JobId(2), noted(150));
        q.expire_budgets(100);
        let end = |q: &Queue, j: u32| q.noted(JobId(j)).map(|n| n.until);
        assert_eq!((end(&q, 0), end(&q, 2)), (None, Some(150)));
        assert_eq!(q.to_visit(1), 2);
        // Leaving the queue forgets it.
        assert!(q.remove(1, 0, 2, JobId(2)));
        assert_eq!((end(&q, 2), q.to_visit(1)), (None, 2));
        q.expire_budgets(Time::MAX);
        assert_eq!(q.kinds_to_visit(1).count(), 1);
        // A job of a `burst_early` tier is noted, but a pass still looks at it: it is not off the jobs to visit.
        q.wait_in_budget(JobId(1), Noted { early: true, ..noted(200) });
        assert_eq!((end(&q, 1), q.to_visit(1)), (Some(200), 2));
        assert_eq!(q.kinds_to_visit(1).collect::<Vec<_>>(), vec![(1, None)]);
        assert_eq!(q.unnoted(1), 1);
        q.leave_budget(JobId(1));
        assert_eq!((end(&q, 1), q.to_visit(1), q.unnoted(1)), (None, 2, 2));
    }

    #[test]
    fn burst_early_jobs_are_grouped_by_shape_with_their_earliest_budget_end() {
        let mut q = Queue::new(1);
        let (one, eight) = (q.kind(1, None), q.kind(8, None));
        let jobs = [
            (one, 1, false, 300),
            (one, 1, false, 100),
            (one, 1, true, 200),
            (one, 2, false, 50),
            (eight, 1, false, 70),
        ];
        for (i, &(kind, workers, spot, until)) in jobs.iter().enumerate() {
            let id = JobId(i as u32);
            q.register(id, 1, kind);
            q.push(0, 0, i as Time, id, false);
            let per_worker = if kind == one { 1 } else { 8 };
            let run = Some(60_000);
            let noted = Noted { until, tier: 0, queued_since: 0, run, kind, per_worker, workers, spot, early: true };
            q.wait_in_budget(id, noted);
        }
        let groups: Vec<_> = q.early_ends(0).collect();
        assert_eq!(groups, vec![(one, 1, false, 100), (one, 1, true, 200), (one, 2, false, 50), (eight, 1, false, 70)]);
        assert_eq!((q.unnoted(0), q.to_visit(0)), (0, 5));
        // The earliest end of a group leaves with its job; a moved end moves.
        q.leave_budget(JobId(1));
        let moved = Noted { until: 40, ..*q.noted(JobId(3)).expect("noted") };
        q.wait_in_budget(JobId(3), moved);
        let groups: Vec<_> = q.early_ends(0).collect();
        assert_eq!(groups, vec![(one, 1, false, 300), (one, 1, true, 200), (one, 2, false, 40), (eight, 1, false, 70)]);
        assert_eq!(q.unnoted(0), 1);
    }

    #[test]
    fn equal_teams_interleave() {
        let mut q = Queue::new(1);
        for i in 0..20 {
            q.register(JobId(i), 1, 0);
        }
        for i in 0..3 {
            q.push(0, 0, i, JobId(i as u32), false);
            q.push(0, 1, i, JobId(10 + i as u32), false);
        }
        let order: Vec<_> = q.cursor(vec![0.0, 0.0], vec![1.0, 1.0]).collect();
        assert_eq!(order, vec![JobId(0), JobId(10), JobId(1), JobId(11), JobId(2), JobId(12)]);
        assert!(q.remove(0, 1, 1, JobId(11)));
        assert_eq!(q.len(), 5);
    }
}
