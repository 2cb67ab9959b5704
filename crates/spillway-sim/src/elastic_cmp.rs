//! Elastic jobs against the same jobs run rigid (`simulate` when any job is elastic): a run of the input as given
//! against a run under the same policy with every job rigid at its most workers, compared job by job. Rigid
//! restarts cost nothing in the simulator and elastic ones cost `SimOptions::elastic_restart_ms`, so the
//! comparison leans toward rigid.

use crate::input::SimJob;
use crate::sim::{SimError, SimOptions, SimOutcome, simulate};
use serde::Serialize;
use spillway_core::{Config, JobId, JobState, Time};

/// What the simulator counts of elastic jobs as it runs (`SimOutcome::elastic`): the GPUs running elastic
/// attempts hold, and would hold at their fewest and at their most workers (the `elastic:*` series columns);
/// the worker time they ran and would have run at their most; growths and shrinks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ElasticTally {
    /// GPUs running elastic attempts hold now: as placed, at their fewest workers, at their most.
    pub gpus: [i64; 3],
    /// Workers they hold now, and their most workers.
    workers: [i64; 2],
    /// Worker-ms they ran, and would have run at their most workers over the same time.
    worker_ms: [i128; 2],
    /// Changes of width to more workers (`StopReason::Resized`).
    pub growths: usize,
    /// Restarts on fewer workers than the attempt before.
    pub shrinks: usize,
    /// When worker time was last accrued.
    last: Time,
}

impl ElasticTally {
    /// Returns a tally of a run that starts at `t0`.
    pub(crate) fn new(t0: Time) -> ElasticTally {
        ElasticTally { last: t0, ..ElasticTally::default() }
    }

    /// Accrues worker time up to `now`.
    pub(crate) fn advance(&mut self, now: Time) {
        let dt = i128::from((now - self.last).max(0));
        for (acc, w) in self.worker_ms.iter_mut().zip(self.workers) {
            *acc += dt * i128::from(w);
        }
        self.last = self.last.max(now);
    }

    /// Counts an elastic attempt starting (`sign` 1) or ending (-1) at `now`: its GPUs as placed, at its fewest
    /// and at its most workers, and its workers as placed and at its most.
    pub(crate) fn count(&mut self, now: Time, sign: i64, gpus: [i64; 3], workers: [i64; 2]) {
        self.advance(now);
        for (x, v) in self.gpus.iter_mut().zip(gpus) {
            *x += sign * v;
        }
        for (x, v) in self.workers.iter_mut().zip(workers) {
            *x += sign * v;
        }
    }

    /// Returns the worker time elastic jobs ran as a share of their most workers over the same time (1 when
    /// none ran).
    pub fn width_share(&self) -> f64 {
        let [held, most] = self.worker_ms;
        if most > 0 { held as f64 / most as f64 } else { 1.0 }
    }
}

/// A figure in the elastic run and in the rigid one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    pub elastic: f64,
    pub rigid: f64,
}

/// What making jobs elastic changed against the same jobs run rigid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ElasticVsRigid {
    /// Jobs elastic in one run and rigid in the other.
    pub jobs: usize,
    /// Of those, the ones that finished in both runs: the completion-time figures are over these.
    pub finished_in_both: usize,
    /// The whole run's cost.
    pub cost_usd: Pair,
    /// Mean completion time (submission to end) of the elastic jobs, seconds.
    pub mean_jct_s: Pair,
    /// Per job, completion time elastic / rigid: 10th, 50th and 90th percentiles (1 means the same).
    pub jct_ratio_p10: f64,
    pub jct_ratio_p50: f64,
    pub jct_ratio_p90: f64,
    /// Jobs that finished more than 1% sooner, or later, elastic than rigid.
    pub faster: usize,
    pub slower: usize,
    /// In the elastic run: growths (`job_resized`), and restarts on fewer workers than the attempt before.
    pub growths: usize,
    pub shrinks: usize,
    /// In the elastic run: the worker-hours elastic jobs ran on, as a share of their most workers over the same
    /// time (1: always at their most).
    pub width_share: f64,
}

/// Returns `jobs` with every job rigid at its most workers.
pub fn rigid_copy(jobs: &[SimJob]) -> Vec<SimJob> {
    let mut out = jobs.to_vec();
    for j in &mut out {
        j.spec.min_workers = None;
    }
    out
}

/// Compares `e`, a run of `jobs` under `cfg` (one policy's config), with a run of the same jobs rigid under the
/// same config, simulated here; `None` when no job is elastic. The rigid run records nothing (`opts.record` and
/// the decision sink are ignored).
pub fn compare(
    cfg: &Config,
    jobs: &[SimJob],
    e: &SimOutcome,
    opts: &SimOptions,
) -> Result<Option<ElasticVsRigid>, SimError> {
    let elastic: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].spec.is_elastic()).collect();
    let Some(tally) = e.elastic.as_ref().filter(|_| !elastic.is_empty()) else { return Ok(None) };
    let quiet = SimOptions { record: false, decisions_to: Default::default(), ..opts.clone() };
    let r = simulate(cfg, &rigid_copy(jobs), &quiet)?;
    let jct = |out: &SimOutcome, i: usize| -> Option<f64> {
        let j = out.engine.job(JobId(i as u32)).filter(|j| j.state == JobState::Succeeded)?;
        Some((j.ended? - j.submitted) as f64 / 1000.0)
    };
    let pairs: Vec<(f64, f64)> = elastic.iter().filter_map(|&i| Some((jct(e, i)?, jct(&r, i)?))).collect();
    let n = pairs.len().max(1) as f64;
    let mut ratios: Vec<f64> = pairs.iter().map(|&(a, b)| if b > 0.0 { a / b } else { 1.0 }).collect();
    ratios.sort_by(f64::total_cmp);
    Ok(Some(ElasticVsRigid {
        jobs: elastic.len(),
        finished_in_both: pairs.len(),
        cost_usd: Pair { elastic: e.engine.cluster().ledger.node_usd, rigid: r.engine.cluster().ledger.node_usd },
        mean_jct_s: Pair {
            elastic: pairs.iter().map(|p| p.0).sum::<f64>() / n,
            rigid: pairs.iter().map(|p| p.1).sum::<f64>() / n,
        },
        jct_ratio_p10: quantile(&ratios, 0.1),
        jct_ratio_p50: quantile(&ratios, 0.5),
        jct_ratio_p90: quantile(&ratios, 0.9),
        faster: ratios.iter().filter(|&&x| x < 0.99).count(),
        slower: ratios.iter().filter(|&&x| x > 1.01).count(),
        growths: tally.growths,
        shrinks: tally.shrinks,
        width_share: tally.width_share(),
    }))
}

/// Returns the nearest-rank `q` quantile of sorted `v`, 1 when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 1.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The comparison as a small text table for the terminal.
pub fn table(c: &ElasticVsRigid) -> String {
    let h = spillway_core::time::fmt_duration;
    let pct = |a: f64, b: f64| if b > 0.0 { format!("{:+.1}%", (a / b - 1.0) * 100.0) } else { "-".into() };
    format!(
        "elastic jobs against the same jobs rigid ({} jobs, {} finished in both runs):\n\
         \x20 cost          ${:.0} elastic, ${:.0} rigid ({})\n\
         \x20 mean JCT      {} elastic, {} rigid ({})\n\
         \x20 JCT per job   elastic/rigid {}\n\
         \x20 widths        {}\n",
        c.jobs,
        c.finished_in_both,
        c.cost_usd.elastic,
        c.cost_usd.rigid,
        pct(c.cost_usd.elastic, c.cost_usd.rigid),
        h(c.mean_jct_s.elastic),
        h(c.mean_jct_s.rigid),
        pct(c.mean_jct_s.elastic, c.mean_jct_s.rigid),
        ratios_text(c),
        widths_text(c)
    )
}

/// The per-job completion-time ratios in words: `p10 0.95, p50 1.00, p90 2.00; 101 sooner, 232 later`.
pub fn ratios_text(c: &ElasticVsRigid) -> String {
    format!(
        "p10 {:.2}, p50 {:.2}, p90 {:.2}; {} sooner, {} later",
        c.jct_ratio_p10, c.jct_ratio_p50, c.jct_ratio_p90, c.faster, c.slower
    )
}

/// The elastic run's widths in words: `1 growths, 1 shrinks; ran on 100% of their most workers`.
pub fn widths_text(c: &ElasticVsRigid) -> String {
    format!("{} growths, {} shrinks; ran on {:.0}% of their most workers", c.growths, c.shrinks, c.width_share * 100.0)
}
