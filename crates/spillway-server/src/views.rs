//! What the API shows: engine jobs, nodes, pools and the ledger turned into the wire types of `spillway-api`.

use crate::state::State;
use spillway_api::{CostView, EventView, JobView, NodeView, PoolView};
use spillway_core::{DecisionKind, Exit, Job, JobState, Market, Node, NodeState, PendingReason, Time};

/// Returns seconds since the epoch.
fn secs(t: Time) -> f64 {
    t as f64 / 1000.0
}

/// Returns the API name of a job state.
pub fn job_state(s: JobState) -> &'static str {
    match s {
        JobState::Queued => "queued",
        JobState::Running => "running",
        JobState::Succeeded => "succeeded",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
    }
}

/// Every job state, in the order of its life.
pub const JOB_STATES: [JobState; 5] =
    [JobState::Queued, JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Cancelled];

/// Returns the job state an API name (`queued`, ...) stands for, or `None` for a name no state has.
pub fn parse_job_state(name: &str) -> Option<JobState> {
    JOB_STATES.into_iter().find(|s| job_state(*s) == name)
}

/// Every kind of recorded decision. [`decision_kind`] matches exhaustively, so a new kind fails the build there
/// until it is named; add it here too (a test checks the two agree with the engine's serialized names).
pub const DECISION_KINDS: [DecisionKind; 16] = [
    DecisionKind::JobStarted,
    DecisionKind::JobPending,
    DecisionKind::JobPreempted,
    DecisionKind::JobRequeued,
    DecisionKind::JobResized,
    DecisionKind::JobFinished,
    DecisionKind::ScaleOut,
    DecisionKind::ScaleOutBlocked,
    DecisionKind::ScaleIn,
    DecisionKind::LaunchFailed,
    DecisionKind::NodeKept,
    DecisionKind::NodeLost,
    DecisionKind::Interruption,
    DecisionKind::Fallback,
    DecisionKind::Admin,
    DecisionKind::Budget,
];

/// Returns the API name of a decision kind (`EventView::kind`).
pub fn decision_kind(k: DecisionKind) -> &'static str {
    match k {
        DecisionKind::JobStarted => "job_started",
        DecisionKind::JobPending => "job_pending",
        DecisionKind::JobPreempted => "job_preempted",
        DecisionKind::JobRequeued => "job_requeued",
        DecisionKind::JobResized => "job_resized",
        DecisionKind::JobFinished => "job_finished",
        DecisionKind::ScaleOut => "scale_out",
        DecisionKind::ScaleOutBlocked => "scale_out_blocked",
        DecisionKind::ScaleIn => "scale_in",
        DecisionKind::LaunchFailed => "launch_failed",
        DecisionKind::NodeKept => "node_kept",
        DecisionKind::NodeLost => "node_lost",
        DecisionKind::Interruption => "interruption",
        DecisionKind::Fallback => "fallback",
        DecisionKind::Admin => "admin",
        DecisionKind::Budget => "budget",
    }
}

/// One page of a list and the cursor of the next page (`None` on the last).
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// Returns a page of the jobs `keep` accepts, newest first, starting at id `from` (inclusive; `None`: the newest):
/// at most `limit` views, and no more once their names and argv reach about
/// [`spillway_api::limits::MAX_PAGE_BYTES`]. The next cursor is the id of the next accepted job, if any. `keep`
/// sees the engine's job, so a view (with its argv) is built only for jobs on the page.
pub fn jobs_page(st: &State, now: Time, from: Option<u32>, limit: usize, keep: impl Fn(&Job) -> bool) -> Page<JobView> {
    let jobs = &st.engine.cluster().jobs;
    let end = from.map_or(jobs.len(), |f| (f as usize).saturating_add(1).min(jobs.len()));
    let mut rest = jobs[..end].iter().rev().filter(|j| keep(j));
    let mut items = Vec::new();
    let mut bytes = 0usize;
    for j in rest.by_ref() {
        let v = job(st, j, now);
        bytes += v.name.len() + v.argv.iter().map(String::len).sum::<usize>();
        items.push(v);
        if items.len() >= limit || bytes >= spillway_api::limits::MAX_PAGE_BYTES {
            break;
        }
    }
    Page { items, next: rest.next().map(|j| j.id.0.to_string()) }
}

/// Returns a page of the recorded decisions `keep` accepts, oldest first, starting at sequence number `from`
/// (inclusive; `None` or a number already dropped from memory: the oldest kept): at most `limit` of them. The
/// next cursor is the sequence number of the next accepted decision, if any.
pub fn events_page(st: &State, from: Option<u64>, limit: usize, keep: impl Fn(&EventView) -> bool) -> Page<EventView> {
    let d = &st.decisions;
    // Sequence numbers only grow along the deque, so the start is a binary search.
    let start = from.map_or(0, |f| d.partition_point(|e| e.seq < f));
    let mut rest = d.range(start..).filter(|e| keep(e));
    let items = rest.by_ref().take(limit).cloned().collect();
    Page { items, next: rest.next().map(|e| e.seq.to_string()) }
}

/// Returns the API name of a node state.
pub fn node_state(s: NodeState) -> &'static str {
    match s {
        NodeState::Requested => "requested",
        NodeState::Ready => "ready",
        NodeState::Draining => "draining",
        NodeState::Terminated => "terminated",
        NodeState::Failed => "failed",
        NodeState::Lost => "lost",
    }
}

/// Returns a job's view.
pub fn job(st: &State, j: &Job, now: Time) -> JobView {
    let c = st.engine.cluster();
    let (exit_code, exit_signal) = Exit::parts(j.exit);
    let price =
        |n: spillway_core::NodeId| c.nodes.get(n.0 as usize).map_or((0.0, 1), |n| (n.price_usd_per_hour, n.gpus));
    let attempts = st.attempts.views(j.id, now.max(st.engine.now()), price);
    JobView {
        id: j.id.0,
        name: j.spec.name.to_string(),
        tier: st.engine.config().tiers[j.tier].name.clone(),
        team: c.teams.get(j.team).map_or_else(String::new, |t| t.name.clone()),
        state: job_state(j.state).into(),
        attempt: j.attempt,
        gpus: j.spec.gpus_per_worker,
        workers: j.spec.workers,
        min_workers: j.spec.is_elastic().then_some(j.gang.workers),
        argv: st.commands.get(j.id.0 as usize).map(|c| c.argv.clone()).unwrap_or_default(),
        submitted_at: secs(j.submitted),
        started_at: j.first_start.map(secs),
        ended_at: j.ended.map(secs),
        nodes: j.placement.iter().map(|(n, _)| n.0).collect(),
        pending_reason: (j.state == JobState::Queued).then(|| j.pending.code().to_string()),
        pending_detail: j
            .not_grown
            .filter(|_| j.state == JobState::Queued && j.pending == PendingReason::NoCapacity)
            .map(|(p, why)| {
                let pool = st.engine.config().pools.get(p).map_or("?", |x| x.name.as_str());
                format!("pool {pool}: {}", why.describe(st.engine.now()))
            }),
        interruptions: j.interruptions,
        preemptions: j.preemptions,
        exit_code,
        exit_signal,
        // Summed from +0.0 (an empty f64 sum is -0.0, shown as `-0.00`).
        cost_usd: attempts.iter().fold(0.0, |acc, a| acc + a.cost_usd) + j.egress_usd(),
        egress_usd: j.egress_usd(),
        attempts,
        checkpoint_gb: j.spec.checkpoint_gb,
        data_region: j.data_at().map(str::to_string),
        spot_state: match (j.pinned_on_demand, j.on_reserve) {
            (true, _) => Some("pinned_on_demand".into()),
            (false, true) => Some("deadline_reserve".into()),
            (false, false) => None,
        },
    }
}

/// Returns a node's view.
pub fn node(st: &State, n: &Node) -> NodeView {
    let cfg = st.engine.config();
    let pool = &cfg.pools[n.pool];
    NodeView {
        id: n.id.0,
        pool: pool.name.clone(),
        instance_type: n.instance_type.map(|i| cfg.instance_types[i].name.clone()),
        market: n.market.as_str().into(),
        // A spot node that ended after its interruption notice was reclaimed, not lost.
        state: if n.interrupted && !n.alive() { "interrupted" } else { node_state(n.state) }.into(),
        gpus: n.gpus,
        free_gpus: if n.alive() { n.free() } else { 0 },
        protected: n.protected || pool.scale_in_protection,
        jobs: n.jobs.iter().map(|j| j.0).collect(),
        slurm_name: n.held.as_ref().map(|h| h.name.clone()),
    }
}

/// Returns every pool's view.
pub fn pools(st: &State) -> Vec<PoolView> {
    let cfg = st.engine.config();
    let c = st.engine.cluster();
    cfg.pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let nodes: Vec<&Node> = c.nodes.iter().filter(|n| n.pool == i && n.alive()).collect();
            let ready: Vec<&&Node> = nodes.iter().filter(|n| n.state == NodeState::Ready).collect();
            let fixed = p.market == Market::Fixed;
            PoolView {
                name: p.name.clone(),
                market: p.market.as_str().into(),
                nodes: nodes.len() as u32,
                ready_nodes: ready.len() as u32,
                min_nodes: if fixed { nodes.len() as u32 } else { p.min_nodes },
                max_nodes: if fixed { nodes.len() as u32 } else { p.max_nodes },
                gpus: ready.iter().map(|n| n.gpus).sum(),
                busy_gpus: ready.iter().map(|n| n.used).sum(),
                protected: p.scale_in_protection,
            }
        })
        .collect()
}

/// Returns the cost so far: the engine's books as they would close at `now` (live nodes and running attempts billed
/// up to now); the running daemon's ledger is not disturbed.
pub fn cost(st: &State, now: Time) -> CostView {
    cost_view(st, &st.engine.cluster().books_at(now))
}

/// Returns what an hour of the present costs, key by key: between two changes of the cluster, the cost at `t` is
/// the cost at the change plus this rate times the hours since.
pub fn cost_rate(st: &State) -> CostView {
    cost_view(st, &st.engine.cluster().hourly_books())
}

/// Returns `l` by the config's names.
fn cost_view(st: &State, l: &spillway_core::ledger::Ledger) -> CostView {
    let cfg = st.engine.config();
    let c = st.engine.cluster();
    let mut v =
        CostView { total_usd: l.total_usd(), idle_usd: l.idle_usd(), egress_usd: l.egress_usd, ..CostView::default() };
    for (i, t) in c.teams.iter().enumerate() {
        v.by_team.insert(t.name.clone(), l.by_team.get(i).copied().unwrap_or(0.0));
    }
    for (i, t) in cfg.tiers.iter().enumerate() {
        v.by_tier.insert(t.name.clone(), l.by_tier.get(i).copied().unwrap_or(0.0));
    }
    for (i, p) in cfg.pools.iter().enumerate() {
        v.by_pool.insert(p.name.clone(), l.by_pool.get(i).copied().unwrap_or(0.0));
    }
    for m in [Market::Fixed, Market::OnDemand, Market::Spot] {
        v.by_market.insert(m.as_str().into(), l.by_market[m.index()]);
        v.node_hours_by_market.insert(m.as_str().into(), l.node_ms_by_market[m.index()] as f64 / 3_600_000.0);
    }
    v
}

/// Returns the cumulative cost at `t` (now or in the past): the last snapshot at or before `t` grown at its
/// hourly rate up to `t` (exact, as a snapshot is taken at every change of rate; an old snapshot with no rate
/// stands as it is), zero before the first.
pub fn cost_at(st: &State, t: Time, now: Time) -> Result<CostView, String> {
    if t >= now {
        return Ok(cost(st, now));
    }
    let Some(snap) = st.store.cost_snapshot_before(t).map_err(|e| e.to_string())? else {
        return Ok(CostView::default());
    };
    let base: CostView = serde_json::from_str(&snap.cost).map_err(|e| format!("cost snapshot: {e}"))?;
    match snap.rate {
        Some(rate) => {
            let rate: CostView = serde_json::from_str(&rate).map_err(|e| format!("cost rate snapshot: {e}"))?;
            Ok(cost_plus(&base, &rate, (t - snap.at_ms) as f64 / 3_600_000.0))
        }
        None => Ok(base),
    }
}

/// Returns `base + rate * hours`, key by key: the cost `hours` after a snapshot whose hourly rate is `rate`.
pub fn cost_plus(base: &CostView, rate: &CostView, hours: f64) -> CostView {
    combine(base, rate, |b, r| b + r * hours)
}

/// Returns `later - earlier`, key by key (a window of two cumulative costs).
pub fn cost_minus(later: &CostView, earlier: &CostView) -> CostView {
    combine(later, earlier, |a, b| a - b)
}

/// Returns `f(a, b)` key by key, over `a`'s keys (a key `b` lacks counts as 0).
fn combine(a: &CostView, b: &CostView, f: impl Fn(f64, f64) -> f64) -> CostView {
    type Keyed = std::collections::BTreeMap<String, f64>;
    let each = |x: &Keyed, y: &Keyed| -> Keyed {
        x.iter().map(|(k, v)| (k.clone(), f(*v, y.get(k).copied().unwrap_or(0.0)))).collect()
    };
    CostView {
        since: None,
        until: None,
        total_usd: f(a.total_usd, b.total_usd),
        idle_usd: f(a.idle_usd, b.idle_usd),
        egress_usd: f(a.egress_usd, b.egress_usd),
        by_team: each(&a.by_team, &b.by_team),
        by_tier: each(&a.by_tier, &b.by_tier),
        by_pool: each(&a.by_pool, &b.by_pool),
        by_market: each(&a.by_market, &b.by_market),
        node_hours_by_market: each(&a.node_hours_by_market, &b.node_hours_by_market),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_kind_names_are_the_engine_names() {
        for k in DECISION_KINDS {
            assert_eq!(serde_json::to_value(k).ok(), Some(serde_json::Value::from(decision_kind(k))));
        }
    }

    #[test]
    fn job_state_names_round_trip() {
        for s in JOB_STATES {
            assert_eq!(parse_job_state(job_state(s)), Some(s));
        }
        assert_eq!(parse_job_state("done"), None);
    }
}
