//! Turns the file as written into a [`Config`]: merges tier defaults, checks every value and reference, and names
//! the key and line of the first thing that is wrong.

use super::locate::line_of;
use super::{Config, Market, Pool, RawConfig, Tier, default_tiers};
use std::collections::BTreeSet;
use std::str::FromStr;

/// A configuration error: the file, the key (`pools[2].min_nodes`), the line (and column) when known, and what is
/// wrong; `also` holds the file's other errors found in the same pass (shown one per line after this one).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub line: Option<usize>,
    pub message: String,
    pub column: Option<u32>,
    pub also: Vec<ConfigError>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = self.line.map_or_else(|| "?".to_string(), |l| l.to_string());
        let column = self.column.map_or_else(String::new, |c| format!(":{c}"));
        write!(f, "{}:{line}{column}: {}: {}", self.file, self.key, self.message)?;
        for e in &self.also {
            write!(f, "\n{e}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// Returns the first of `errors` carrying the others, or `None` for none.
    pub(super) fn all(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        if errors.is_empty() {
            return None;
        }
        let mut first = errors.remove(0);
        first.also = errors;
        Some(first)
    }

    /// Wraps a TOML syntax or type error, keeping its line.
    pub(super) fn from_toml(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
        let at = e.span().map(|s| super::locate::line_column(text, s.start));
        let (line, column) = (at.map(|a| a.0), at.map(|a| a.1));
        let message = e.message().trim().to_string();
        // The parser reports a position: name the table entry and key there; a missing key is named in the
        // message (`missing field `to``), under the table it is missing from.
        let missing = message.strip_prefix("missing field `").and_then(|m| m.split('`').next());
        let place = e.span().and_then(|s| super::locate::key_at(text, s.start));
        let key = match (place, missing) {
            (Some(p), Some(m)) => format!("{p}.{m}"),
            (Some(p), None) => p,
            (None, Some(m)) => m.to_string(),
            (None, None) => "(syntax)".into(),
        };
        ConfigError { file: file.into(), key, line, message, column, also: Vec::new() }
    }
}

/// Collects the context for errors: the file name and text to locate keys in.
pub(super) struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    pub(super) fn err(&self, table: &str, index: Option<usize>, key: &str, message: String) -> ConfigError {
        let line = line_of(self.text, table, index, key).or_else(|| line_of(self.text, table, index, ""));
        let key = match (index, key.is_empty()) {
            (Some(i), false) => format!("{table}[{i}].{key}"),
            (Some(i), true) => format!("{table}[{i}]"),
            (None, false) => format!("{table}.{key}"),
            (None, true) => table.to_string(),
        };
        ConfigError { file: self.file.into(), key, line, message, column: None, also: Vec::new() }
    }
}

pub(super) fn resolve(file: &str, text: &str, raw: RawConfig) -> Result<Config, ConfigError> {
    let cx = Ctx { file, text };
    let start_ms = chrono::DateTime::parse_from_rfc3339(&raw.cluster.start)
        .map_err(|e| cx.err("cluster", None, "start", format!("`{}` is not an RFC 3339 time: {e}", raw.cluster.start)))?
        .timestamp_millis();
    let tiers = resolve_tiers(&cx, &raw)?;
    check_teams(&cx, &raw)?;
    check_instance_types(&cx, &raw)?;
    check_pools(&cx, &raw, &tiers)?;
    check_schedules(&cx, &raw)?;
    if raw.policy.spot_share.is_some_and(|s| !(0.0..=1.0).contains(&s)) {
        return Err(cx.err("policy", None, "spot_share", "must be a share in [0, 1]".into()));
    }
    if !(raw.policy.max_offering_share > 0.0 && raw.policy.max_offering_share <= 1.0) {
        return Err(cx.err("policy", None, "max_offering_share", "must be a share in (0, 1]".into()));
    }
    if !(raw.policy.elastic_resize_interval_s >= 0.0 && raw.policy.elastic_resize_interval_s <= 365.0 * 86_400.0) {
        let why = "must be a number of seconds from 0 to 365 days".into();
        return Err(cx.err("policy", None, "elastic_resize_interval_s", why));
    }
    if !(raw.policy.deadline_margin_s >= 0.0 && raw.policy.deadline_margin_s.is_finite()) {
        return Err(cx.err("policy", None, "deadline_margin_s", "must be a finite number >= 0".into()));
    }
    // Each trip is about a boot, a checkpoint and a margin: a thousand of them is already weeks of slack, and a
    // larger number is a typo that would keep every deadline job off spot from its start.
    if raw.policy.deadline_reserve_trips > 1000 {
        let why = "must be at most 1000 (trips of a boot, a checkpoint and the margin each)".into();
        return Err(cx.err("policy", None, "deadline_reserve_trips", why));
    }
    if raw.policy.scan_limit == 0 {
        return Err(cx.err("policy", None, "scan_limit", "must be at least 1".into()));
    }
    check_quotas(&cx, &raw)?;
    super::network::check(&cx, &raw.network)?;
    super::budget::check(&cx, &raw.budgets, &raw.alerts, &raw.teams)?;
    super::prometheus::check(&cx, raw.prometheus.as_ref(), &raw.pools)?;
    if let Some(p) = &raw.provider {
        match p.get("kind").and_then(|k| k.as_str()) {
            Some("aws") => {}
            Some("local") => {
                if let Some(key) = p.keys().find(|k| *k != "kind") {
                    return Err(cx.err("provider", None, key, "the local provider takes no settings".into()));
                }
            }
            _ => return Err(cx.err("provider", None, "kind", "must be \"local\" or \"aws\"".into())),
        }
    }
    // The built-in table is parsed only where some pool has a region to move between.
    let egress = if raw.pools.iter().any(|p| p.region.is_some()) {
        super::EgressTable::new(&raw.network)
    } else {
        super::EgressTable::default()
    };
    Ok(Config {
        cluster: raw.cluster,
        start_ms,
        tiers,
        teams: raw.teams,
        instance_types: raw.instance_types,
        pools: raw.pools,
        schedules: raw.schedules,
        policy: raw.policy,
        quotas: raw.quotas,
        budgets: raw.budgets,
        alerts: raw.alerts,
        prometheus: raw.prometheus,
        provider: raw.provider,
        slurm: raw.slurm,
        egress,
        network: raw.network,
    })
}

/// The highest price per hour a config may give a node type or an owned GPU: far above any real one, low enough
/// that a year of a large cluster's costs stays a finite number a report can print.
const MAX_USD_PER_HOUR: f64 = 1.0e6;

/// Checks a price per hour: from 0 to [`MAX_USD_PER_HOUR`] (NaN is outside).
fn price(p: f64) -> Result<(), String> {
    if (0.0..=MAX_USD_PER_HOUR).contains(&p) {
        Ok(())
    } else {
        Err(format!("must be a price from 0 to {MAX_USD_PER_HOUR} USD an hour"))
    }
}

fn resolve_tiers(cx: &Ctx, raw: &RawConfig) -> Result<Vec<Tier>, ConfigError> {
    let mut tiers = default_tiers();
    for (name, spec) in &raw.tiers {
        let table = format!("tiers.{name}");
        let slot = match tiers.iter().position(|t| &t.name == name) {
            Some(i) => i,
            None => {
                let Some(priority) = spec.priority else {
                    return Err(cx.err(&table, None, "", format!("new tier `{name}` needs a `priority`")));
                };
                let mut t = default_tiers().remove(1);
                t.name = name.clone();
                t.priority = priority;
                tiers.push(t);
                tiers.len() - 1
            }
        };
        let t = &mut tiers[slot];
        let secs = |key: &str, v: Option<f64>, min: f64| -> Result<Option<f64>, ConfigError> {
            match v {
                Some(x) if !(x >= min && x.is_finite()) => {
                    Err(cx.err(&table, None, key, format!("must be a finite number >= {min}, got {x}")))
                }
                other => Ok(other),
            }
        };
        if let Some(p) = spec.priority {
            t.priority = p;
        }
        if let Some(m) = &spec.markets {
            if m.is_empty() {
                return Err(cx.err(&table, None, "markets", "must list at least one market".into()));
            }
            t.markets = m.clone();
        }
        if let Some(v) = spec.interruptible {
            t.interruptible = v;
        }
        if let Some(v) = spec.preemptible {
            t.preemptible = v;
        }
        t.queue_wait_slo_s = secs("queue_wait_slo_s", spec.queue_wait_slo_s, 0.0)?.unwrap_or(t.queue_wait_slo_s);
        t.burst_after_s = secs("burst_after_s", spec.burst_after_s, 0.0)?.unwrap_or(t.burst_after_s);
        t.burst_wait_per_gpu_hour_s = secs("burst_wait_per_gpu_hour_s", spec.burst_wait_per_gpu_hour_s, 0.0)?
            .unwrap_or(t.burst_wait_per_gpu_hour_s);
        t.burst_wait_max_s = secs("burst_wait_max_s", spec.burst_wait_max_s, 0.0)?.unwrap_or(t.burst_wait_max_s);
        t.spot_fallback_after_s =
            secs("spot_fallback_after_s", spec.spot_fallback_after_s, 0.0)?.unwrap_or(t.spot_fallback_after_s);
        t.checkpoint_time_s = secs("checkpoint_time_s", spec.checkpoint_time_s, 0.0)?.unwrap_or(t.checkpoint_time_s);
        if let Some(v) = spec.burst_early {
            t.burst_early = v;
        }
        if spec.max_spot_interruptions.is_some() {
            t.max_spot_interruptions = spec.max_spot_interruptions;
        }
        if let Some(c) = secs("checkpoint_interval_s", spec.checkpoint_interval_s, 1.0)? {
            t.checkpoint_interval_s = Some(c);
        }
    }
    tiers.sort_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
    for w in tiers.windows(2) {
        if w[0].priority == w[1].priority {
            let table = format!("tiers.{}", w[1].name);
            return Err(cx.err(
                &table,
                None,
                "priority",
                format!("priority {} is also tier `{}`'s", w[1].priority, w[0].name),
            ));
        }
    }
    Ok(tiers)
}

fn check_teams(cx: &Ctx, raw: &RawConfig) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, t) in raw.teams.iter().enumerate() {
        if !seen.insert(&t.name) {
            return Err(cx.err("teams", Some(i), "name", format!("team `{}` is defined twice", t.name)));
        }
        if t.name.is_empty() || t.name.chars().any(char::is_control) {
            // A team name appears in tables, alert texts and metric labels: one printable line.
            return Err(cx.err(
                "teams",
                Some(i),
                "name",
                format!("{:?} must be non-empty, without control characters", t.name),
            ));
        }
        if !(t.weight > 0.0 && t.weight.is_finite()) {
            return Err(cx.err("teams", Some(i), "weight", format!("must be > 0, got {}", t.weight)));
        }
    }
    Ok(())
}

fn check_instance_types(cx: &Ctx, raw: &RawConfig) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, it) in raw.instance_types.iter().enumerate() {
        if !seen.insert(&it.name) {
            return Err(cx.err(
                "instance_types",
                Some(i),
                "name",
                format!("instance type `{}` is defined twice", it.name),
            ));
        }
        if it.gpus == 0 {
            return Err(cx.err("instance_types", Some(i), "gpus", "must be at least 1".into()));
        }
        price(it.on_demand_usd_per_hour).map_err(|m| cx.err("instance_types", Some(i), "on_demand_usd_per_hour", m))?;
        if let Some(p) = it.spot_usd_per_hour {
            price(p).map_err(|m| cx.err("instance_types", Some(i), "spot_usd_per_hour", m))?;
        }
    }
    Ok(())
}

/// Checks `[[quotas]]`: unique names, a cloud market, and types the config defines with their vCPUs.
fn check_quotas(cx: &Ctx, raw: &RawConfig) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, q) in raw.quotas.iter().enumerate() {
        if !seen.insert(&q.name) {
            return Err(cx.err("quotas", Some(i), "name", format!("quota `{}` is defined twice", q.name)));
        }
        if q.market == Market::Fixed {
            return Err(cx.err(
                "quotas",
                Some(i),
                "market",
                "must be on_demand or spot (fixed nodes need no quota)".into(),
            ));
        }
        if q.instance_types.is_empty() {
            return Err(cx.err("quotas", Some(i), "instance_types", "must name at least one instance type".into()));
        }
        for name in &q.instance_types {
            match raw.instance_types.iter().find(|t| t.name == *name) {
                None => {
                    return Err(cx.err("quotas", Some(i), "instance_types", format!("no instance type `{name}`")));
                }
                Some(t) if t.vcpus.is_none_or(|v| v == 0) => {
                    return Err(cx.err(
                        "quotas",
                        Some(i),
                        "instance_types",
                        format!(
                            "instance type `{name}` needs `vcpus` (at least 1) to count against quota `{}`",
                            q.name
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// A pool Slurm drives buys nodes only when Slurm names them: nothing of Spillway's own scaling applies to it.
fn check_external_pool(cx: &Ctx, i: usize, p: &Pool) -> Result<(), ConfigError> {
    if !p.external() {
        return Ok(());
    }
    let e = |key: &str, msg: &str| Err(cx.err("pools", Some(i), key, format!("pool `{}` ({msg})", p.name)));
    if p.min_nodes > 0 {
        return e("min_nodes", "scheduler = \"slurm\": Slurm asks for its nodes, so min_nodes must be 0");
    }
    if p.target_gpu_utilization.is_some() || !p.step_scaling.is_empty() || p.predictive.is_some() {
        return e("scheduler", "scheduler = \"slurm\" takes no target tracking, step or predictive scaling");
    }
    Ok(())
}

/// Checks a pool's region, zone and own spot prices: names not blank, prices for its own types, spot only.
fn check_pool_place(cx: &Ctx, i: usize, p: &super::Pool) -> Result<(), ConfigError> {
    let e = |key: &str, msg: String| cx.err("pools", Some(i), key, msg);
    if let Some(r) = &p.region {
        super::network::check_region(r).map_err(|m| e("region", m))?;
    }
    if let Some(z) = &p.zone {
        super::network::check_place(z, "zone", "us-east-1a").map_err(|m| e("zone", m))?;
        // A zone without a region is allowed (an AWS daemon's pools are in its provider's region); with one, the
        // zone must be in it.
        if let Some(r) = p.region.as_ref().filter(|r| !(z.len() > r.len() && z.starts_with(r.as_str()))) {
            return Err(e("zone", format!("`{z}` is not in region `{r}` (a zone's name starts with its region's)")));
        }
    }
    if !p.spot_usd_per_hour.is_empty() && p.market != Market::Spot {
        return Err(e("spot_usd_per_hour", "is for spot pools".into()));
    }
    for (name, &price) in &p.spot_usd_per_hour {
        if !p.instance_types.contains(name) {
            return Err(e("spot_usd_per_hour", format!("names `{name}`, which the pool does not allow")));
        }
        if !(price > 0.0 && price <= MAX_USD_PER_HOUR) {
            return Err(e(
                "spot_usd_per_hour",
                format!("`{name}` costs {price:e}: must be a price in (0, {MAX_USD_PER_HOUR}]"),
            ));
        }
    }
    Ok(())
}

fn check_pools(cx: &Ctx, raw: &RawConfig, tiers: &[Tier]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    let e = |i: usize, key: &str, msg: String| cx.err("pools", Some(i), key, msg);
    for (i, p) in raw.pools.iter().enumerate() {
        if !seen.insert(&p.name) {
            return Err(e(i, "name", format!("pool `{}` is defined twice", p.name)));
        }
        check_pool_numbers(cx, i, p)?;
        check_pool_place(cx, i, p)?;
        if p.market == Market::Fixed {
            if p.nodes.is_empty() {
                return Err(e(i, "nodes", format!("fixed pool `{}` lists no nodes", p.name)));
            }
            if !p.instance_types.is_empty() {
                return Err(e(i, "instance_types", "a fixed pool lists `nodes`, not instance types".into()));
            }
            if let Some(n) = p.nodes.iter().find(|n| n.gpus == 0) {
                return Err(e(i, "nodes", format!("a node group of {} nodes has 0 GPUs", n.count)));
            }
            continue;
        }
        if p.instance_types.is_empty() {
            return Err(e(i, "instance_types", format!("cloud pool `{}` allows no instance types", p.name)));
        }
        for name in &p.instance_types {
            let Some(it) = raw.instance_types.iter().find(|t| &t.name == name) else {
                return Err(e(
                    i,
                    "instance_types",
                    format!("unknown instance type `{name}` (not in [[instance_types]])"),
                ));
            };
            if it.price_usd_per_hour(p.market).is_none() && !p.spot_usd_per_hour.contains_key(name) {
                return Err(e(
                    i,
                    "instance_types",
                    format!("instance type `{name}` has no {} price", p.market.as_str()),
                ));
            }
        }
        for name in p.capacity.keys() {
            if !p.instance_types.contains(name) {
                return Err(e(i, "capacity", format!("capacity names `{name}`, which the pool does not allow")));
            }
        }
        if p.min_nodes > p.max_nodes {
            return Err(e(i, "min_nodes", format!("min_nodes {} > max_nodes {}", p.min_nodes, p.max_nodes)));
        }
        if p.max_nodes == 0 {
            return Err(e(i, "max_nodes", "a cloud pool needs max_nodes >= 1".into()));
        }
        check_external_pool(cx, i, p)?;
        if let Some(pr) = &p.predictive {
            if crate::autoscale::forecast::steps_per_day(pr.bucket_s).is_err() {
                return Err(e(
                    i,
                    "predictive",
                    format!("bucket_s {} must divide a day into at least 2 buckets", pr.bucket_s),
                ));
            }
            if !(pr.buffer_s >= 0.0 && pr.buffer_s.is_finite()) {
                return Err(e(i, "predictive", "buffer_s must be a finite number >= 0".into()));
            }
        }
        for b in &p.step_scaling {
            if b.above.is_some() == b.below.is_some() {
                return Err(e(i, "step_scaling", "each band sets exactly one of `above` or `below`".into()));
            }
            if !(b.hold_s >= 0.0 && b.hold_s.is_finite()) || b.adjust_nodes == 0 {
                return Err(e(i, "step_scaling", "a band needs hold_s >= 0 and a non-zero adjust_nodes".into()));
            }
            // A threshold outside [0, 1] is a band that can never fire (utilization is a share).
            if let Some(v) = b.above.or(b.below).filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(e(
                    i,
                    "step_scaling",
                    format!("a band's `above` or `below` is a utilization in [0, 1], got {v}"),
                ));
            }
        }
        if p.target_gpu_utilization.is_some_and(|t| !(t > 0.0 && t <= 1.0)) {
            return Err(e(i, "target_gpu_utilization", "must be a share in (0, 1]".into()));
        }
        if !(0.0..=1.0).contains(&p.launch_failure_rate) {
            return Err(e(i, "launch_failure_rate", "must be a probability in [0, 1]".into()));
        }
    }
    if raw.pools.is_empty() {
        return Err(cx.err("pools", None, "", "the config defines no pools".into()));
    }
    for t in tiers {
        if !raw.pools.iter().any(|p| t.markets.contains(&p.market)) {
            let table = format!("tiers.{}", t.name);
            return Err(cx.err(
                &table,
                None,
                "markets",
                format!("tier `{}` may run on no pool of this config", t.name),
            ));
        }
    }
    Ok(())
}

/// Checks a pool's numbers that must be finite and non-negative, whatever its market (a fixed pool ignores most
/// of them, but a value written must still make sense).
fn check_pool_numbers(cx: &Ctx, i: usize, p: &super::Pool) -> Result<(), ConfigError> {
    price(p.gpu_usd_per_hour).map_err(|m| cx.err("pools", Some(i), "gpu_usd_per_hour", m))?;
    for (key, v) in [
        ("boot_latency_s", p.boot_latency_s),
        ("idle_timeout_s", p.idle_timeout_s),
        ("scale_out_cooldown_s", p.scale_out_cooldown_s),
        ("scale_in_cooldown_s", p.scale_in_cooldown_s),
        ("max_step_fraction", p.max_step_fraction),
        ("boot_jitter", p.boot_jitter),
        ("interruption_notice_s", p.interruption_notice_s),
        ("interruption_rate_per_hour", p.interruption_rate_per_hour),
        ("utilization_warmup_s", p.utilization_warmup_s),
    ] {
        if !(v >= 0.0 && v.is_finite()) {
            return Err(cx.err("pools", Some(i), key, format!("must be a finite number >= 0, got {v}")));
        }
    }
    let fixed: u64 = p.nodes.iter().map(|n| u64::from(n.count)).sum();
    for (key, n) in [("nodes", fixed), ("max_nodes", u64::from(p.max_nodes))] {
        if n > MAX_POOL_NODES {
            let msg = format!("{n} nodes is more than a pool may have ({MAX_POOL_NODES})");
            return Err(cx.err("pools", Some(i), key, msg));
        }
    }
    Ok(())
}

/// The most nodes one pool may list or grow to: 100,000 (800,000 GPUs of 8-GPU nodes) is past any cluster, and a
/// simulation of that many still runs (a pass looks at every node: one job on 100,000 nodes took 9 s, on 1,000,000
/// it did not end in two minutes).
pub const MAX_POOL_NODES: u64 = 100_000;

fn check_schedules(cx: &Ctx, raw: &RawConfig) -> Result<(), ConfigError> {
    for (i, s) in raw.schedules.iter().enumerate() {
        let e = |key: &str, msg: String| cx.err("schedules", Some(i), key, msg);
        let Some(pool) = raw.pools.iter().find(|p| p.name == s.pool) else {
            return Err(e("pool", format!("unknown pool `{}`", s.pool)));
        };
        if pool.market == Market::Fixed {
            return Err(e("pool", format!("pool `{}` is fixed; schedules apply to cloud pools", s.pool)));
        }
        croner::Cron::from_str(&s.cron).map_err(|err| e("cron", format!("`{}` does not parse: {err}", s.cron)))?;
        chrono_tz::Tz::from_str(&s.timezone)
            .map_err(|_| e("timezone", format!("`{}` is not an IANA time zone", s.timezone)))?;
        if !(s.duration_s > 0.0 && s.duration_s.is_finite()) {
            return Err(e("duration_s", format!("must be > 0, got {}", s.duration_s)));
        }
        if s.min_nodes.is_none() && s.max_nodes.is_none() && s.desired_nodes.is_none() {
            return Err(e("", "a schedule sets min_nodes, max_nodes or desired_nodes".into()));
        }
        for (key, v) in [("min_nodes", s.min_nodes), ("max_nodes", s.max_nodes), ("desired_nodes", s.desired_nodes)] {
            if let Some(v) = v.filter(|&v| v > pool.max_nodes) {
                return Err(e(key, format!("{key} {v} > pool `{}` max_nodes {}", s.pool, pool.max_nodes)));
            }
        }
        let max = s.max_nodes.unwrap_or(pool.max_nodes);
        if let Some(v) = s.min_nodes.into_iter().chain(s.desired_nodes).find(|&v| v > max) {
            return Err(e("max_nodes", format!("max_nodes {max} is below the schedule's min or desired {v}")));
        }
    }
    Ok(())
}
