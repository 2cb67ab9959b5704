//! Elastic jobs against the same jobs run rigid (`simulate` when any job is elastic): the same input simulated
//! twice under the same policy, once as given and once with every job rigid at its most workers, compared job by
//! job. Rigid restarts cost nothing in the simulator and elastic ones cost `SimOptions::elastic_restart_ms`, so
//! the comparison leans toward rigid.

use crate::input::SimJob;
use crate::sim::{SimError, SimOptions, SimOutcome, simulate};
use serde::Serialize;
use spillway_core::{Action, Config, JobId, JobState, StopReason, Time};
use std::collections::BTreeMap;

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

/// Simulates `jobs` as given and rigid under `cfg` (one policy's config) and compares their elastic jobs; `None`
/// when no job is elastic. Records nothing (`opts.record` and the decision sink are ignored).
pub fn compare(cfg: &Config, jobs: &[SimJob], opts: &SimOptions) -> Result<Option<ElasticVsRigid>, SimError> {
    let elastic: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].spec.is_elastic()).collect();
    if elastic.is_empty() {
        return Ok(None);
    }
    let quiet = SimOptions { record: false, keep_actions: true, decisions_to: Default::default(), ..opts.clone() };
    let e = simulate(cfg, jobs, &quiet)?;
    let r = simulate(cfg, &rigid_copy(jobs), &SimOptions { keep_actions: false, ..quiet })?;
    let jct = |out: &SimOutcome, i: usize| -> Option<f64> {
        let j = out.engine.job(JobId(i as u32)).filter(|j| j.state == JobState::Succeeded)?;
        Some((j.ended? - j.submitted) as f64 / 1000.0)
    };
    let pairs: Vec<(f64, f64)> = elastic.iter().filter_map(|&i| Some((jct(&e, i)?, jct(&r, i)?))).collect();
    let n = pairs.len().max(1) as f64;
    let mut ratios: Vec<f64> = pairs.iter().map(|&(a, b)| if b > 0.0 { a / b } else { 1.0 }).collect();
    ratios.sort_by(f64::total_cmp);
    let (growths, shrinks, width_share) = widths(&e, jobs);
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
        growths,
        shrinks,
        width_share,
    }))
}

/// Returns the nearest-rank `q` quantile of sorted `v`, 1 when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 1.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Returns, from the elastic run's actions: growths, shrinks, and the worker-time share of the most.
fn widths(out: &SimOutcome, jobs: &[SimJob]) -> (usize, usize, f64) {
    let (mut growths, mut shrinks) = (0, 0);
    // Per elastic job: the running attempt's (start, width), and its last width.
    let mut open: BTreeMap<JobId, (Time, usize)> = BTreeMap::new();
    let mut last: BTreeMap<JobId, usize> = BTreeMap::new();
    let (mut held, mut most) = (0.0f64, 0.0f64);
    let mut close = |id: JobId, from: Time, width: usize, to: Time| {
        let most_w = jobs.get(id.0 as usize).map_or(width as u32, |j| j.spec.workers);
        let ms = (to - from).max(0) as f64;
        held += ms * width as f64;
        most += ms * f64::from(most_w);
    };
    for (at, a) in &out.actions {
        match a {
            Action::StartJob { job, placement, .. } if jobs[job.0 as usize].spec.is_elastic() => {
                let w = placement.len();
                if last.get(job).is_some_and(|&before| w < before) {
                    shrinks += 1;
                }
                last.insert(*job, w);
                open.insert(*job, (*at, w));
            }
            Action::StopJob { job, reason, .. } => {
                if matches!(reason, StopReason::Resized { .. }) {
                    growths += 1;
                }
                if let Some((from, w)) = open.remove(job) {
                    close(*job, from, w, *at);
                }
            }
            _ => {}
        }
    }
    // Attempts still open ran to their job's end (or the run's).
    for (id, (from, w)) in open {
        let end = out.engine.job(id).and_then(|j| j.ended).unwrap_or(out.engine.now());
        close(id, from, w, end);
    }
    (growths, shrinks, if most > 0.0 { held / most } else { 1.0 })
}

/// The comparison as a small text table for the terminal.
pub fn table(c: &ElasticVsRigid) -> String {
    let h = spillway_core::time::fmt_duration;
    let pct = |a: f64, b: f64| if b > 0.0 { format!("{:+.1}%", (a / b - 1.0) * 100.0) } else { "-".into() };
    format!(
        "elastic jobs against the same jobs rigid ({} jobs, {} finished in both runs):\n\
         \x20 cost          ${:.0} elastic, ${:.0} rigid ({})\n\
         \x20 mean JCT      {} elastic, {} rigid ({})\n\
         \x20 JCT per job   elastic/rigid p10 {:.2}, p50 {:.2}, p90 {:.2}; {} sooner, {} later\n\
         \x20 widths        {} growths, {} shrinks; ran on {:.0}% of their most workers\n",
        c.jobs,
        c.finished_in_both,
        c.cost_usd.elastic,
        c.cost_usd.rigid,
        pct(c.cost_usd.elastic, c.cost_usd.rigid),
        h(c.mean_jct_s.elastic),
        h(c.mean_jct_s.rigid),
        pct(c.mean_jct_s.elastic, c.mean_jct_s.rigid),
        c.jct_ratio_p10,
        c.jct_ratio_p50,
        c.jct_ratio_p90,
        c.faster,
        c.slower,
        c.growths,
        c.shrinks,
        c.width_share * 100.0
    )
}
