//! `GET /metrics`: the daemon's state as Prometheus metrics (OpenMetrics text, through `prometheus-client`). Every
//! figure is derived from the replayed state at scrape time, so a restart loses no count: gauges of nodes, GPUs,
//! jobs and queues; histograms of queue waits and boot times; counters of decisions, scaling actions,
//! interruptions, preemptions and fallbacks; cost in USD by team, tier, pool and market; budgets' spend and limits.
//!
//! Names follow Prometheus's conventions: the `spillway_` prefix, base units (seconds, USD), `_total` on counters.

use crate::state::State;
use crate::views;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use spillway_core::config::Market;
use spillway_core::{JobState, NodeState, Time};
use std::sync::atomic::AtomicU64;

/// Label pairs of one series.
type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

/// The content type of the OpenMetrics exposition (what Prometheus asks for first).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the classic text exposition (for clients that do not ask for OpenMetrics).
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Queue-wait buckets (s): a second to a day, for tiers whose SLOs run from seconds (p0) to hours (p2).
const WAIT_BUCKETS: [f64; 14] =
    [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0];
/// Boot-time buckets (s): a local agent boots in seconds, a cloud GPU instance in minutes.
const BOOT_BUCKETS: [f64; 11] = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0];

/// Returns the exposition of `st` at `now`.
pub fn render(st: &mut State, now: Time) -> String {
    let mut r = Registry::with_prefix("spillway");
    capacity(&mut r, st);
    jobs(&mut r, st, now);
    decisions(&mut r, st);
    cost(&mut r, st, now);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// Returns an OpenMetrics exposition in the classic text format (0.0.4): a counter's HELP and TYPE name its
/// `_total` samples, and the `# UNIT` and `# EOF` lines go (that format has neither).
pub fn classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut lines = openmetrics.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            let counter = lines.peek().is_some_and(|t| *t == format!("# TYPE {name} counter"));
            if counter {
                lines.next();
                let help = rest.get(name.len()..).unwrap_or("");
                out += &format!("# HELP {name}_total{help}\n# TYPE {name}_total counter\n");
                continue;
            }
        }
        out += line;
        out.push('\n');
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Nodes by pool, market and state; GPUs allocatable and allocated; pool bounds; boot times.
fn capacity(r: &mut Registry, st: &State) {
    let cfg = st.engine.config();
    let c = st.engine.cluster();
    let nodes = Family::<Labels, Gauge>::default();
    let allocatable = Family::<Labels, Gauge>::default();
    let allocated = Family::<Labels, Gauge>::default();
    let (min, max) = (Family::<Labels, Gauge>::default(), Family::<Labels, Gauge>::default());
    let launched = Family::<Labels, Counter>::default();
    let boot = Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(BOOT_BUCKETS));
    // The pool's GPUs and bounds as `GET /v1/pools` reports them.
    for (i, (p, view)) in cfg.pools.iter().zip(views::pools(st)).enumerate() {
        let pool = labels(&[("pool", &p.name)]);
        for s in [NodeState::Requested, NodeState::Ready, NodeState::Draining] {
            let n = c.nodes.iter().filter(|n| n.pool == i && n.state == s).count();
            let state = views::node_state(s);
            nodes
                .get_or_create(&labels(&[("pool", &p.name), ("market", p.market.as_str()), ("state", state)]))
                .set(n as i64);
        }
        allocatable.get_or_create(&pool).set(view.gpus as i64);
        allocated.get_or_create(&pool).set(view.busy_gpus as i64);
        min.get_or_create(&pool).set(view.min_nodes as i64);
        max.get_or_create(&pool).set(view.max_nodes as i64);
        let fixed = p.market == Market::Fixed;
        let bought = c.nodes.iter().filter(|n| n.pool == i && !fixed);
        launched.get_or_create(&pool).inc_by(bought.clone().count() as u64);
        let h = boot.get_or_create(&pool);
        for n in bought {
            if let Some(ready) = n.ready_at {
                h.observe((ready - n.requested_at).max(0) as f64 / 1000.0);
            }
        }
    }
    r.register("nodes", "Nodes by pool, market and state (requested, ready, draining)", nodes);
    r.register("gpus_allocatable", "GPUs of ready nodes, by pool", allocatable);
    r.register("gpus_allocated", "GPUs of ready nodes bound to running jobs, by pool", allocated);
    r.register("pool_min_nodes", "A pool's lower bound of nodes (a fixed pool: its nodes)", min);
    r.register("pool_max_nodes", "A pool's upper bound of nodes (a fixed pool: its nodes)", max);
    r.register("nodes_launched", "Cloud nodes launched, by pool", launched);
    r.register_with_unit("node_boot", "Time from a node's launch to its first heartbeat, by pool", Unit::Seconds, boot);
}

/// Jobs by tier and state, queued GPUs, the oldest wait and the queue-wait histogram per tier.
fn jobs(r: &mut Registry, st: &State, now: Time) {
    let cfg = st.engine.config();
    let c = st.engine.cluster();
    let jobs = Family::<Labels, Gauge>::default();
    let queued = Family::<Labels, Gauge>::default();
    let oldest = Family::<Labels, FloatGauge>::default();
    let wait = Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(WAIT_BUCKETS));
    let (preempted, interrupted) = (Family::<Labels, Counter>::default(), Family::<Labels, Counter>::default());
    for t in &cfg.tiers {
        let tier = labels(&[("tier", &t.name)]);
        for s in views::JOB_STATES {
            jobs.get_or_create(&labels(&[("tier", &t.name), ("state", views::job_state(s))])).set(0);
        }
        queued.get_or_create(&tier).set(0);
        oldest.get_or_create(&tier).set(0.0);
        let _ = wait.get_or_create(&tier);
        let _ = preempted.get_or_create(&tier);
        let _ = interrupted.get_or_create(&tier);
    }
    for j in &c.jobs {
        let tier = labels(&[("tier", &cfg.tiers[j.tier].name)]);
        jobs.get_or_create(&labels(&[("tier", &cfg.tiers[j.tier].name), ("state", views::job_state(j.state))])).inc();
        if j.state == JobState::Queued {
            queued.get_or_create(&tier).inc_by(j.total_gpus() as i64);
            let w = (now - j.queued_since).max(0) as f64 / 1000.0;
            let g = oldest.get_or_create(&tier);
            if w > g.get() {
                g.set(w);
            }
        }
        if let Some(start) = j.first_start {
            wait.get_or_create(&tier).observe((start - j.submitted).max(0) as f64 / 1000.0);
        }
        preempted.get_or_create(&tier).inc_by(j.preemptions as u64);
        interrupted.get_or_create(&tier).inc_by(j.interruptions as u64);
    }
    r.register("jobs", "Jobs by tier and state", jobs);
    r.register("queued_gpus", "GPUs asked for by queued jobs, by tier", queued);
    r.register_with_unit("oldest_queued", "Longest current queue wait, by tier", Unit::Seconds, oldest);
    r.register_with_unit("queue_wait", "Time from submission to a job's first start, by tier", Unit::Seconds, wait);
    r.register("job_preemptions", "Times a job was preempted, by the job's tier", preempted);
    r.register("job_interruptions", "Spot interruptions jobs went through, by the job's tier", interrupted);
}

/// Decisions by kind and reason; scaling actions by pool, direction and reason; the engine's counters.
fn decisions(r: &mut Registry, st: &State) {
    let all = Family::<Labels, Counter>::default();
    let scaling = Family::<Labels, Counter>::default();
    let fallbacks = Family::<Labels, Counter>::default();
    let interruptions = Family::<Labels, Counter>::default();
    for p in &st.engine.config().pools {
        let _ = interruptions.get_or_create(&labels(&[("pool", &p.name)]));
    }
    for t in &st.engine.config().tiers {
        let _ = fallbacks.get_or_create(&labels(&[("tier", &t.name)]));
    }
    for (k, &n) in &st.decision_counts {
        all.get_or_create(&labels(&[("kind", &k.kind), ("reason", &k.reason)])).inc_by(n);
        match k.kind.as_str() {
            "scale_out" | "scale_in" => {
                let direction = if k.kind == "scale_out" { "out" } else { "in" };
                let l = labels(&[("pool", &k.pool), ("direction", direction), ("reason", &k.reason)]);
                scaling.get_or_create(&l).inc_by(n);
            }
            "fallback" => {
                fallbacks.get_or_create(&labels(&[("tier", &k.tier)])).inc_by(n);
            }
            "interruption" if k.reason == "interruption_notice" => {
                interruptions.get_or_create(&labels(&[("pool", &k.pool)])).inc_by(n);
            }
            _ => {}
        }
    }
    r.register("decisions", "Decisions by kind and reason (the event log's codes)", all);
    r.register("scaling_actions", "Scale-out and scale-in decisions by pool, direction and reason", scaling);
    r.register(
        "fallbacks",
        "Moves away from an offering or market, by the job's tier (reasons: spillway_decisions_total)",
        fallbacks,
    );
    r.register("interruption_notices", "Spot interruption notices, by pool", interruptions);
    let k = &st.engine.cluster().counters;
    for (name, help, v) in [
        ("launch_failures", "Launches that failed", k.launch_failures),
        ("preemptions", "Jobs preempted", k.preemptions),
        ("interruptions", "Spot interruption notices", k.interruptions),
        ("requeues", "Jobs requeued", k.requeues),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        r.register(name, help, c);
    }
}

/// Cost in USD so far by team, tier, pool and market, idle cost, and budgets.
fn cost(r: &mut Registry, st: &mut State, now: Time) {
    let v = views::cost(st, now);
    let budgets = st.engine.budget_status(now);
    // A sum of floats recomputed at each scrape may come out a hair lower than the last (idle cost is a
    // difference of two growing sums); a counter must never go down, so each series keeps its highest value.
    let floor = &mut st.metric_floor;
    let mut counted = |key: String, x: f64| -> f64 {
        let kept = floor.entry(key).or_insert(0.0);
        *kept = kept.max(x);
        *kept
    };
    for (name, help, label, map) in [
        ("team_cost", "Cost so far by team (USD)", "team", &v.by_team),
        ("tier_cost", "Cost so far by tier (USD)", "tier", &v.by_tier),
        ("pool_cost", "Cost so far by pool (USD)", "pool", &v.by_pool),
        ("market_cost", "Cost so far by market (USD)", "market", &v.by_market),
    ] {
        let f = Family::<Labels, FloatCounter>::default();
        for (k, x) in map {
            f.get_or_create(&labels(&[(label, k)])).inc_by(counted(format!("{name}/{k}"), *x));
        }
        r.register_with_unit(name, help, usd(), f);
    }
    let idle = FloatCounter::default();
    idle.inc_by(counted("idle_cost".into(), v.idle_usd));
    r.register_with_unit("idle_cost", "Cost of GPUs bound to no job so far (USD)", usd(), idle);
    let (spent, limit) = (Family::<Labels, FloatGauge>::default(), Family::<Labels, FloatGauge>::default());
    let capping = Family::<Labels, Gauge>::default();
    for b in budgets {
        let l = labels(&[("team", &b.team), ("period", b.period.as_str())]);
        spent.get_or_create(&l).set(b.spent_usd);
        limit.get_or_create(&l).set(b.limit_usd);
        capping.get_or_create(&l).set(i64::from(b.capping));
    }
    r.register_with_unit("budget_spent", "A team's spend in its budget's current period (USD)", usd(), spent);
    r.register_with_unit("budget_limit", "A team's budget for the period (USD)", usd(), limit);
    r.register("budget_capping", "1 while a budget's hard cap stops buying for the team's work", capping);
}

/// The unit of money metrics: `_usd` in their names.
fn usd() -> Unit {
    Unit::Other("usd".into())
}
