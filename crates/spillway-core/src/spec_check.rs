//! Checks of a job spec before the engine takes it: lengths, tier, sizes, times, data size and region, and that
//! some pool could ever hold the gang. Each refusal names the field at fault.

use crate::config::{Config, GangRoom};
use crate::model::JobSpec;

/// Why a job spec was refused; its Display starts with the field at fault (`workers: ...`), which
/// [`SubmitError::field`] returns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// The tier is not in the config.
    #[error("tier: unknown tier `{0}` (the config defines {1})")]
    UnknownTier(String, String),
    /// GPUs or workers is zero.
    #[error("{0}: must be at least 1")]
    Zero(&'static str),
    /// No node the tier may use has enough GPUs (of the model asked for) for one worker.
    #[error("gpus: {gpus} GPUs per worker{model} exceed the largest node tier {tier} may use ({largest} GPUs)")]
    TooLarge { gpus: u32, model: String, tier: String, largest: u32 },
    /// No pool the tier may use has GPUs of the model the job asks for.
    #[error("gpu_type: no pool tier {tier} may use has {model} GPUs")]
    NoSuchModel { model: String, tier: String },
    /// The whole gang needs more GPUs than the team's quota.
    #[error("workers: the job needs {need} GPUs, more than team `{team}`'s quota of {quota}")]
    OverQuota { need: u32, team: String, quota: u32 },
    /// GPUs per worker x workers does not fit a `u32`.
    #[error("workers: {workers} workers of {gpus} GPUs need more than {max} GPUs in all", max = u32::MAX)]
    GangOverflow { gpus: u32, workers: u32 },
    /// No single pool the job may use could ever hold the whole gang; `largest` is the most workers of its size
    /// any could, and `room` says where (empty when none holds one).
    #[error("{field}: {} of {} cannot run: the largest gang tier {tier} could ever run is {largest}{room}", count(*workers, "worker"), count(*gpus, "GPU"))]
    GangTooLarge { field: &'static str, workers: u32, gpus: u32, tier: String, largest: u32, room: String },
    /// An elastic job's fewest workers exceed its most.
    #[error("min_workers: {min} is more than max_workers ({max})")]
    ElasticRange { min: u32, max: u32 },
    /// A text field is longer than the engine keeps.
    #[error("{field}: {len} bytes is too long (at most {max})")]
    TooLong { field: &'static str, len: usize, max: usize },
    /// A time or duration outside the range the engine accepts; `range` says it in words.
    #[error("{field}: {value} is out of range ({range})")]
    OutOfRange { field: &'static str, value: i64, range: &'static str },
    /// A checkpoint size that is not a number of GB from 0 to 1,000,000.
    #[error("checkpoint_gb: {value:e} is not a size from 0 to 1000000 GB")]
    BadSize { value: f64 },
    /// A data region that is not a region's name.
    #[error("data_region: {0}")]
    BadRegion(String),
}

impl SubmitError {
    /// Returns the field the refusal names: the start of its Display, before the first `:`.
    pub fn field(&self) -> &'static str {
        match self {
            SubmitError::UnknownTier(..) => "tier",
            SubmitError::Zero(f) | SubmitError::TooLong { field: f, .. } | SubmitError::OutOfRange { field: f, .. } => {
                f
            }
            SubmitError::TooLarge { .. } => "gpus",
            SubmitError::ElasticRange { .. } => "min_workers",
            SubmitError::BadSize { .. } => "checkpoint_gb",
            SubmitError::BadRegion(_) => "data_region",
            SubmitError::NoSuchModel { .. } => "gpu_type",
            SubmitError::GangTooLarge { field, .. } => field,
            SubmitError::OverQuota { .. } | SubmitError::GangOverflow { .. } => "workers",
        }
    }
}

/// Returns `n` followed by `noun`, plural unless `n` is 1.
fn count(n: u32, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Longest job name the engine keeps, in bytes (names go into every decision record and API view).
pub const MAX_NAME_BYTES: usize = 256;
/// Longest tier, team or GPU model name, in bytes.
pub const MAX_LABEL_BYTES: usize = 128;
/// Checkpoint intervals accepted: 1 s (the config's floor for tiers) to 365 days.
pub const CHECKPOINT_INTERVAL_MS: std::ops::RangeInclusive<i64> = 1_000..=365 * DAY_MS;
/// Expected durations accepted: 1 ms to 10 years (of 365.25 days).
pub const EXPECTED_DURATION_MS: std::ops::RangeInclusive<i64> = 1..=3_652 * DAY_MS + DAY_MS / 2;
/// Deadlines accepted, ms since the Unix epoch: the epoch to the last millisecond of year 9999. Bounded so that
/// deadline arithmetic (minus durations, plus margins) never leaves `i64`.
pub const DEADLINE_MS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;
const DAY_MS: i64 = 86_400_000;

/// Checks a new submission and returns its tier index: what [`check_spec`] checks, and the rules added after jobs
/// were first logged, which a daemon replaying its log must not apply to jobs it accepted before them (it would
/// fail them): a `data_region` needs a `checkpoint_gb`.
pub fn check_new_spec(cfg: &Config, spec: &JobSpec) -> Result<usize, SubmitError> {
    let tier = check_spec(cfg, spec)?;
    // A region alone would be kept and shown, yet never weighed: refused, so a user does not think it is.
    if spec.data_region.is_some() && spec.checkpoint_gb.is_none() {
        let why = "needs checkpoint_gb (the GB a start in another region moves; 0 for none): without it the region \
            is never weighed";
        return Err(SubmitError::BadRegion(why.into()));
    }
    Ok(tier)
}

/// Checks a job spec against a config and returns its tier index: text fields within their lengths, the tier
/// exists, sizes non-zero, times within their ranges, a worker fits the largest node its tier may use, the gang's
/// GPU count fits a `u32`, some single pool it may use could ever hold the whole gang, and the gang fits its
/// team's quota. Each refusal names its field.
pub fn check_spec(cfg: &Config, spec: &JobSpec) -> Result<usize, SubmitError> {
    // Lengths first, so an oversized name is never echoed into another refusal's message.
    check_lengths(spec)?;
    let tier = cfg.tier_index(&spec.tier).ok_or_else(|| {
        let names: Vec<_> = cfg.tiers.iter().map(|t| t.name.as_str()).collect();
        SubmitError::UnknownTier(spec.tier.to_string(), names.join(", "))
    })?;
    if spec.gpus_per_worker == 0 {
        return Err(SubmitError::Zero("gpus"));
    }
    if spec.workers == 0 {
        return Err(SubmitError::Zero("workers"));
    }
    match spec.min_workers {
        Some(0) => return Err(SubmitError::Zero("min_workers")),
        Some(min) if min > spec.workers => {
            return Err(SubmitError::ElasticRange { min, max: spec.workers });
        }
        _ => {}
    }
    check_times(spec)?;
    // A petabyte is past any checkpoint; the bound keeps egress and transfer times finite.
    if let Some(gb) = spec.checkpoint_gb.filter(|g| !(*g >= 0.0 && *g <= 1.0e6)) {
        return Err(SubmitError::BadSize { value: gb });
    }
    if let Some(r) = &spec.data_region {
        crate::config::check_region(r).map_err(SubmitError::BadRegion)?;
    }
    let largest = cfg.largest_node_gpus(tier, spec.gpu_model.as_deref());
    if let (0, Some(model)) = (largest, &spec.gpu_model) {
        return Err(SubmitError::NoSuchModel { model: model.clone(), tier: spec.tier.to_string() });
    }
    if spec.gpus_per_worker > largest {
        return Err(SubmitError::TooLarge {
            gpus: spec.gpus_per_worker,
            model: spec.gpu_model.as_ref().map_or(String::new(), |m| format!(" of model {m}")),
            tier: spec.tier.to_string(),
            largest,
        });
    }
    let need = gang_gpus(spec)?;
    check_gang_fits(cfg, tier, spec)?;
    if let Some(quota) = cfg.teams.iter().find(|t| t.name == spec.team).and_then(|t| t.quota_gpus).filter(|&q| need > q)
    {
        return Err(SubmitError::OverQuota { need, team: spec.team.to_string(), quota });
    }
    Ok(tier)
}

/// Refuses text fields longer than the engine keeps.
fn check_lengths(spec: &JobSpec) -> Result<(), SubmitError> {
    let fields = [
        ("name", spec.name.len(), MAX_NAME_BYTES),
        ("tier", spec.tier.len(), MAX_LABEL_BYTES),
        ("team", spec.team.len(), MAX_LABEL_BYTES),
        ("gpu_model", spec.gpu_model.as_ref().map_or(0, String::len), MAX_LABEL_BYTES),
        ("data_region", spec.data_region.as_ref().map_or(0, String::len), MAX_LABEL_BYTES),
    ];
    match fields.into_iter().find(|&(_, len, max)| len > max) {
        Some((field, len, max)) => Err(SubmitError::TooLong { field, len, max }),
        None => Ok(()),
    }
}

/// Refuses a checkpoint interval, expected duration or deadline outside its range.
fn check_times(spec: &JobSpec) -> Result<(), SubmitError> {
    let fields = [
        ("checkpoint_interval_ms", spec.checkpoint_interval_ms, CHECKPOINT_INTERVAL_MS, "1000 ms to 365 days"),
        ("expected_duration_ms", spec.expected_duration_ms, EXPECTED_DURATION_MS, "1 ms to 10 years"),
        ("deadline", spec.deadline, DEADLINE_MS, "ms since the Unix epoch, up to the end of year 9999"),
    ];
    for (field, value, allowed, range) in fields {
        if let Some(value) = value.filter(|v| !allowed.contains(v)) {
            return Err(SubmitError::OutOfRange { field, value, range });
        }
    }
    Ok(())
}

/// Returns the GPUs the job needs to start (all its workers, or an elastic job's fewest), or a refusal when the
/// product of GPUs and its most workers overflows.
pub(crate) fn gang_gpus(spec: &JobSpec) -> Result<u32, SubmitError> {
    let overflow = SubmitError::GangOverflow { gpus: spec.gpus_per_worker, workers: spec.workers };
    spec.checked_total_gpus().ok_or(overflow)?;
    Ok(spec.gpus_per_worker.saturating_mul(spec.fewest_workers()))
}

/// Refuses a gang that no single pool the job may use could ever hold: it would wait for ever, and keep the
/// autoscaler buying and removing nodes for it.
fn check_gang_fits(cfg: &Config, tier: usize, spec: &JobSpec) -> Result<(), SubmitError> {
    let t = &cfg.tiers[tier];
    let interruptible = spec.interruptible.unwrap_or(t.interruptible);
    let room = cfg.largest_gang(tier, spec.gpus_per_worker, spec.gpu_model.as_deref(), interruptible);
    let largest = room.map_or(0, |r| r.workers);
    // An elastic job's fewest workers must fit to start, and its most too: more than could ever run would only
    // be bought for (scale-out buys for them) and never used. Each refusal names its own field.
    let (field, workers) = match spec.min_workers.filter(|_| spec.is_elastic()) {
        Some(min) if min > largest => ("min_workers", min),
        Some(_) => ("max_workers", spec.workers),
        None => ("workers", spec.workers),
    };
    if workers <= largest {
        return Ok(());
    }
    let room = match room {
        Some(GangRoom { pool, nodes, per_node: Some(per), .. }) => {
            format!(" (pool {}: {} x {})", cfg.pools[pool].name, count(nodes, "node"), count(per, "worker"))
        }
        Some(GangRoom { pool, nodes, per_node: None, .. }) => {
            format!(" (pool {}: {} on {})", cfg.pools[pool].name, count(largest, "worker"), count(nodes, "node"))
        }
        // Only spot could hold a worker: say so, since the job (or its tier) is what keeps it off spot.
        None if !interruptible
            && cfg.largest_gang(tier, spec.gpus_per_worker, spec.gpu_model.as_deref(), true).is_some() =>
        {
            " (only spot pools hold a worker of this size, and the job is not interruptible)".to_string()
        }
        // Otherwise the pools whose nodes would hold a worker may have none now (max_nodes lowered to 0).
        None => " (no pool it may use may have a node now that holds a worker of this size)".to_string(),
    };
    Err(SubmitError::GangTooLarge { field, workers, gpus: spec.gpus_per_worker, tier: t.name.clone(), largest, room })
}
