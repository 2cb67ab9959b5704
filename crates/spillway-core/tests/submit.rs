//! What a submission may ask for: gang sizes that overflow or that no single pool could ever hold, quotas on the
//! checked total, sane ranges of times and lengths of names (each refusal names its field), and the failed job a
//! shell records for a logged submission the engine now refuses.

use spillway_core::engine::{CHECKPOINT_INTERVAL_MS, DEADLINE_MS, EXPECTED_DURATION_MS};
use spillway_core::{Action, DecisionKind, Event, GangRoom, JobId, JobSpec, JobState, SubmitError, check_spec};

mod common;
use common::*;

/// 2 fixed nodes of 8 V100s (pool 0, `onprem`), an on-demand pool of 8-V100 nodes up to 5 (pool 1, `od`) and a
/// spot pool of 4-T4 nodes up to 20 (pool 2, `spot`): 56 GPUs without spot, 136 with it.
const CLUSTER: &str = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0

[[instance_types]]
name = "g4"
gpus = 4
gpu_model = "T4"
on_demand_usd_per_hour = 4.0
spot_usd_per_hour = 1.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 2, gpus = 8, gpu_model = "V100" }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 5

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g4"]
max_nodes = 20

[[teams]]
name = "capped"
quota_gpus = 4
"#;

fn refusal(h: &mut Harness, s: JobSpec) -> SubmitError {
    let before = h.e.cluster().jobs.len();
    let err = h.e.submit(h.now, s.clone()).err().unwrap_or_else(|| panic!("accepted: {s:?}"));
    assert_eq!(h.e.cluster().jobs.len(), before, "a refused job leaves nothing behind");
    h.check("refused submission");
    err
}

fn not_interruptible(mut s: JobSpec) -> JobSpec {
    s.interruptible = Some(false);
    s
}

// ---- Gang sizes ----

#[test]
fn a_gang_of_u32_max_workers_is_refused_before_anything_is_allocated() {
    let mut h = Harness::new(CLUSTER);
    let err = refusal(&mut h, spec("p1", 1, u32::MAX));
    assert_eq!(err.field(), "workers");
    assert!(err.to_string().starts_with("workers: 4294967295 workers of 1 GPU cannot run"), "{err}");
    assert!(non_records(&h.drain()).is_empty());
}

#[test]
fn a_gang_whose_gpu_count_overflows_is_refused_and_the_quota_sees_the_true_total() {
    let mut h = Harness::new(CLUSTER);
    // 4 x 2^30 GPUs wraps to 0 in u32: it must not slip under a 4-GPU quota that refuses 4 x 2.
    let err = refusal(&mut h, spec_of("p1", "capped", 4, 1 << 30));
    assert_eq!(err, SubmitError::GangOverflow { gpus: 4, workers: 1 << 30 });
    assert!(
        err.to_string().starts_with("workers: 1073741824 workers of 4 GPUs need more than 4294967295 GPUs"),
        "{err}"
    );
    let err = refusal(&mut h, spec_of("p1", "capped", 4, 2));
    assert!(matches!(err, SubmitError::OverQuota { need: 8, quota: 4, .. }), "{err:?}");
    h.submit(spec_of("p1", "capped", 4, 1));
}

#[test]
fn a_gang_larger_than_any_single_pool_is_refused_naming_the_largest_that_could_run() {
    let mut h = Harness::new(CLUSTER);
    // 100 x 4 GPUs on 56 on-demand GPUs; p0 may not use spot. The on-demand pool holds 5 nodes x 2 workers.
    let err = refusal(&mut h, spec("p0", 4, 100));
    assert_eq!(
        err.to_string(),
        "workers: 100 workers of 4 GPUs cannot run: the largest gang tier p0 could ever run is 10 (pool od: 5 nodes x 2 workers)"
    );
    // 11 workers of 4 GPUs fit the cluster's 56 GPUs in all, but no single pool: a gang runs within one.
    let err = refusal(&mut h, spec("p0", 4, 11));
    assert!(err.to_string().contains("is 10 (pool od"), "{err}");
    let fits = h.submit(spec("p0", 4, 10));
    assert_eq!(h.job(fits).state, JobState::Queued);
}

#[test]
fn a_gang_of_more_workers_than_a_pool_has_nodes_counts_workers_sharing_nodes() {
    // No pool has 5 nodes; 4-GPU workers share the fixed pool's 8-GPU nodes two by two.
    let fixed_only = "[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\nnodes = [{ count = 2, gpus = 8 }, { count = 1, gpus = 2 }]\n";
    let mut h = Harness::new(fixed_only);
    let err = refusal(&mut h, spec("p0", 4, 5));
    assert_eq!(
        err.to_string(),
        "workers: 5 workers of 4 GPUs cannot run: the largest gang tier p0 could ever run is 4 (pool onprem: 4 workers on 2 nodes)"
    );
    let gang = h.submit(spec("p0", 4, 4));
    let p = started(&h.drain(), gang).expect("the gang of 4 starts on the 2 nodes");
    assert_eq!(p.len(), 4);
}

#[test]
fn spot_pools_hold_a_gang_only_when_the_job_is_interruptible() {
    let mut h = Harness::new(CLUSTER);
    // 20 spot nodes x 1 worker of 4 GPUs: 20 workers for an interruptible p1 job, 10 (on demand) otherwise.
    h.submit(spec("p1", 4, 20));
    let err = refusal(&mut h, not_interruptible(spec("p1", 4, 20)));
    assert!(err.to_string().ends_with("is 10 (pool od: 5 nodes x 2 workers)"), "{err}");
    // A T4 worker only spot sells: a job that may not use spot has nowhere to go.
    let mut t4 = not_interruptible(spec("p1", 4, 1));
    t4.gpu_model = Some("T4".into());
    let err = refusal(&mut h, t4.clone());
    assert_eq!(
        err.to_string(),
        "workers: 1 worker of 4 GPUs cannot run: the largest gang tier p1 could ever run is 0 (only spot pools hold a \
         worker of this size, and the job is not interruptible)"
    );
    t4.interruptible = None;
    h.submit(t4);
}

#[test]
fn the_largest_gang_follows_pool_bounds_changed_by_events() {
    let mut h = Harness::new(CLUSTER);
    refusal(&mut h, spec("p0", 8, 6));
    h.event(Event::SetPoolBounds { pool: 1, min_nodes: None, max_nodes: Some(6) });
    h.submit(spec("p0", 8, 6));
    h.event(Event::SetPoolBounds { pool: 1, min_nodes: None, max_nodes: Some(1) });
    let err = refusal(&mut h, spec("p0", 8, 3));
    assert!(err.to_string().ends_with("is 2 (pool onprem: 2 workers on 2 nodes)"), "{err}");
    // check_spec against the engine's config says the same, so a shell can check before it logs.
    assert_eq!(check_spec(h.e.config(), &spec("p0", 8, 3)).err(), Some(err));
    // Only spot sells T4s; with its max at 0 no pool may hold a T4 worker now.
    h.event(Event::SetPoolBounds { pool: 2, min_nodes: None, max_nodes: Some(0) });
    let mut t4 = spec("p1", 4, 1);
    t4.gpu_model = Some("T4".into());
    let err = refusal(&mut h, t4);
    assert!(
        err.to_string().ends_with("is 0 (no pool it may use may have a node now that holds a worker of this size)"),
        "{err}"
    );
}

#[test]
fn largest_gang_reports_the_pool_and_how_it_holds_the_gang() {
    let cfg = parse(CLUSTER);
    let p1 = cfg.tier_index("p1").unwrap_or(usize::MAX);
    let room = |g, model, interruptible| cfg.largest_gang(p1, g, model, interruptible);
    assert_eq!(room(4, None, true), Some(GangRoom { workers: 20, pool: 2, nodes: 20, per_node: Some(1) }));
    assert_eq!(room(4, None, false), Some(GangRoom { workers: 10, pool: 1, nodes: 5, per_node: Some(2) }));
    assert_eq!(room(1, None, false), Some(GangRoom { workers: 40, pool: 1, nodes: 5, per_node: Some(8) }));
    // A model filter with alternatives; a model no pool has.
    assert_eq!(room(8, Some("A100|V100"), false), Some(GangRoom { workers: 5, pool: 1, nodes: 5, per_node: Some(1) }));
    assert_eq!(room(8, Some("A100"), true), None);
    assert_eq!(room(16, None, true), None);
    assert_eq!(room(0, None, true), None);
    assert_eq!(cfg.largest_gang(99, 1, None, true), None);
}

// ---- Ranges and lengths ----

#[test]
fn times_outside_their_ranges_are_refused_naming_the_field() {
    let mut h = Harness::new(CLUSTER);
    let with = |f: &dyn Fn(&mut JobSpec)| -> JobSpec {
        let mut s = spec("p1", 1, 1);
        f(&mut s);
        s
    };
    let (ck, dur, dl) = (CHECKPOINT_INTERVAL_MS, EXPECTED_DURATION_MS, DEADLINE_MS);
    assert_eq!((*ck.start(), *ck.end()), (1_000, 365 * 86_400_000));
    assert_eq!((*dur.start(), *dur.end()), (1, 3_652 * 86_400_000 + 43_200_000));
    assert_eq!((*dl.start(), *dl.end()), (0, 253_402_300_799_999));
    let bad: [(JobSpec, &str); 7] = [
        (with(&|s: &mut JobSpec| s.checkpoint_interval_ms = Some(999)), "checkpoint_interval_ms: 999 is out of range"),
        (with(&|s: &mut JobSpec| s.checkpoint_interval_ms = Some(ck.end() + 1)), "checkpoint_interval_ms: "),
        (with(&|s: &mut JobSpec| s.checkpoint_interval_ms = Some(i64::MIN)), "checkpoint_interval_ms: "),
        (with(&|s: &mut JobSpec| s.expected_duration_ms = Some(0)), "expected_duration_ms: 0 is out of range"),
        (with(&|s: &mut JobSpec| s.expected_duration_ms = Some(dur.end() + 1)), "expected_duration_ms: "),
        (with(&|s: &mut JobSpec| s.deadline = Some(-1)), "deadline: -1 is out of range"),
        (with(&|s: &mut JobSpec| s.deadline = Some(i64::MAX)), "deadline: "),
    ];
    for (s, prefix) in bad {
        let err = refusal(&mut h, s);
        assert!(err.to_string().starts_with(prefix), "want {prefix}...: {err}");
        assert_eq!(err.field(), prefix.split(':').next().unwrap_or(""));
    }
    h.submit(with(&|s: &mut JobSpec| s.checkpoint_interval_ms = Some(*ck.start())));
    h.submit(with(&|s: &mut JobSpec| s.checkpoint_interval_ms = Some(*ck.end())));
    h.submit(with(&|s: &mut JobSpec| s.expected_duration_ms = Some(*dur.end())));
    h.submit(with(&|s: &mut JobSpec| s.deadline = Some(*dl.end())));
}

#[test]
fn names_longer_than_the_engine_keeps_are_refused_naming_the_field() {
    let mut h = Harness::new(CLUSTER);
    let long = |n: usize| "x".repeat(n);
    let mut s = spec("p1", 1, 1);
    s.name = long(257).into();
    assert_eq!(refusal(&mut h, s).to_string(), "name: 257 bytes is too long (at most 256)");
    // Checked before the tier is looked up, so the refusal does not echo a huge unknown name.
    let mut s = spec("p1", 1, 1);
    s.tier = long(1 << 20).into();
    let err = refusal(&mut h, s);
    assert_eq!(err.to_string(), "tier: 1048576 bytes is too long (at most 128)");
    assert_eq!(refusal(&mut h, spec_of("p1", &long(129), 1, 1)).field(), "team");
    let mut s = spec("p1", 1, 1);
    s.gpu_model = Some(long(129));
    assert_eq!(refusal(&mut h, s).field(), "gpu_model");
    let mut s = spec_of("p1", &long(128), 1, 1);
    s.name = long(256).into();
    h.submit(s);
}

// ---- Submissions refused on replay ----

#[test]
fn a_refused_replayed_submission_becomes_a_failed_job_and_keeps_later_ids() {
    let mut h = Harness::new(CLUSTER);
    let first = h.submit(spec("p1", 1, 1));
    h.drain();
    h.at(30.0);
    // An old log holds a submission today's rules refuse, with sizes whose product overflows.
    let old = spec("p1", 8, u32::MAX);
    let reason = h.e.submit(h.now, old.clone()).err().map(|e| e.to_string()).unwrap_or_default();
    let id = h.e.submit_refused(h.now, old, reason.clone());
    h.check("submit_refused");
    assert_eq!(id, JobId(first.0 + 1));
    let j = h.job(id);
    assert_eq!(
        (j.state, j.ended, j.first_start, j.attempt_start, j.attempt),
        (JobState::Failed, Some(h.now), None, None, 0)
    );
    assert_eq!(j.total_gpus(), u32::MAX, "the size saturates");
    assert_eq!(h.e.queued(), 0);
    let a = h.drain();
    assert!(non_records(&a).is_empty(), "nothing is launched or started for it: {a:?}");
    let rec = h.records_of(DecisionKind::JobFinished, "refused_on_replay");
    assert_eq!(rec.len(), 1);
    assert_eq!(
        (rec[0].subject.as_str(), rec[0].detail.as_str(), rec[0].at),
        (format!("job:{}", id.0).as_str(), reason.as_str(), h.now)
    );
    // Later submissions get the ids the log gave them, and the engine runs on.
    let next = h.submit(spec("p1", 1, 1));
    assert_eq!(next, JobId(id.0 + 1));
    assert!(started(&h.drain(), next).is_some());
    h.event(Event::CancelJob { job: id });
    assert_eq!(h.job(id).state, JobState::Failed, "a failed job stays failed");
}

#[test]
fn a_refused_replayed_submission_of_an_unknown_tier_gets_a_valid_tier() {
    let mut h = Harness::new(CLUSTER);
    let id = h.e.submit_refused(0, spec("gone", 1, 1), "tier: unknown tier `gone`".into());
    h.check("submit_refused");
    let cfg = h.e.config();
    assert_eq!(cfg.tiers[h.job(id).tier].name, "p2", "the lowest-priority tier");
    assert_eq!(h.job(id).spec.tier, "gone", "the spec is kept as given");
    let recorded = std::iter::from_fn(|| h.e.poll_action())
        .any(|a| matches!(a, Action::Record(d) if d.reason == "refused_on_replay"));
    assert!(recorded);
}
