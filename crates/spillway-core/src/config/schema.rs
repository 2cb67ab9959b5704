//! Every key of the config file: its type, default and meaning. One list serves three readers: the key check
//! ([`super::keys`]: every unknown key and wrong type in one pass, with "did you mean"), the reference
//! (`docs/config.md`, written by [`reference`] and kept true by a test), and a test that compares it with the
//! serde types, so a key added to a struct and not here fails.

/// What a key holds.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A whole number from 0 to 4,294,967,295.
    Int,
    /// A whole number that may be negative (a step's `adjust_nodes`).
    SignedInt,
    Float,
    Bool,
    Str,
    /// Seconds: a number, or a string with units (`"90s"`, `"5m"`, `"1h30m"`).
    Secs,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A list of values of a kind.
    List(&'static Kind),
    /// A table of the given keys.
    Table(&'static [Key]),
    /// A list of tables of the given keys (`[[pools]]`).
    Tables(&'static [Key]),
    /// A table whose keys are names the user picks, each holding a value of a kind (`[tiers.<name>]`).
    Named(&'static Kind),
    /// A table read by another part of the daemon (`[provider]`, `[slurm]`), checked there.
    Free(&'static str),
}

/// One key: its name, what it holds, its default (as the reference shows it; empty: required) and meaning.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub doc: &'static str,
}

const fn k(name: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Key {
    Key { name, kind, default, doc }
}

const MARKETS: &[&str] = &["fixed", "on_demand", "spot"];

use Kind::*;

pub const CLUSTER: &[Key] = &[
    k("name", Str, "\"spillway\"", "The cluster's name (cloud tags, alerts, ids)."),
    k("start", Str, "\"2025-01-06T00:00:00Z\"", "RFC 3339 instant that second 0 of a simulated trace maps to."),
];

pub const TIER: &[Key] = &[
    k("priority", Int, "p0 0, p1 1, p2 2", "Lower runs first; a new tier must set it."),
    k("markets", List(&OneOf(MARKETS)), "p0 fixed+on_demand, p1 all, p2 fixed+spot", "Markets its jobs may use."),
    k("queue_wait_slo_s", Secs, "p0 0, p1 10m, p2 1h", "Wait after which a job misses its SLO and may preempt."),
    k("interruptible", Bool, "p0 false, p1/p2 true", "Jobs may run on spot unless they say otherwise."),
    k("preemptible", Bool, "p0 false, p1/p2 true", "Higher tiers may preempt its jobs."),
    k("checkpoint_interval_s", Secs, "p0 1h, p1 30m, p2 15m", "How often its jobs checkpoint unless they say."),
    k("burst_after_s", Secs, "p0 0, p1 60s, p2 5m", "Wait for owned capacity before cloud capacity is bought."),
    k(
        "burst_wait_per_gpu_hour_s",
        Secs,
        "0",
        "Further wait per GPU-hour of a job's expected work (large jobs wait longer; Starburst's budget).",
    ),
    k("burst_wait_max_s", Secs, "none (no cap)", "The most a job's waiting budget, fixed part too, may reach."),
    k(
        "burst_early",
        Bool,
        "false",
        "A job whose workers no owned GPUs (free, or of jobs expected to end) could hold before its budget ends, \
         even with no queue ahead, bursts at once.",
    ),
    k("spot_fallback_after_s", Secs, "p0 0, p1 5m, p2 never", "Wait for spot before on-demand is bought."),
    k("checkpoint_time_s", Secs, "p0 2m, p1/p2 60s", "Time a job needs to write a checkpoint when signalled."),
    k("max_spot_interruptions", Int, "p1 3, else none", "After this many interruptions a job moves to on-demand."),
];

pub const TEAM: &[Key] = &[
    k("name", Str, "", "The team's name (tokens, quotas, cost)."),
    k("quota_gpus", Int, "none", "Most GPUs its jobs may hold at once."),
    k("weight", Float, "1.0", "Fair-share weight among teams of one tier."),
];

pub const INSTANCE_TYPE: &[Key] = &[
    k("name", Str, "", "The cloud's name for it (`p4d.24xlarge`)."),
    k("gpus", Int, "", "GPUs per node."),
    k("gpu_model", Str, "", "GPU model jobs ask for (`A100`)."),
    k("on_demand_usd_per_hour", Float, "", "On-demand price of one node."),
    k("spot_usd_per_hour", Float, "none (no spot)", "Spot price of one node; AWS's price replaces it when polled."),
    k("vcpus", Int, "none", "vCPUs per node, for `[[quotas]]`."),
];

pub const QUOTA: &[Key] = &[
    k("name", Str, "", "Its name in decisions."),
    k("market", OneOf(MARKETS), "", "The market it limits."),
    k("instance_types", List(&Str), "", "Instance types it counts."),
    k("max_vcpus", Int, "", "Most vCPUs of those types alive at once."),
];

pub const FIXED_NODES: &[Key] = &[
    k("count", Int, "", "How many such nodes."),
    k("gpus", Int, "", "GPUs per node."),
    k("gpu_model", Str, "\"any\"", "Their GPU model (`any` holds every job)."),
];

pub const STEP_BAND: &[Key] = &[
    k("above", Float, "none", "Utilization share this band acts above (set exactly one of `above`, `below`)."),
    k("below", Float, "none", "Utilization share this band acts below."),
    k("hold_s", Secs, "5m", "How long the utilization must stay there."),
    k("adjust_nodes", SignedInt, "", "Nodes to add (negative: remove)."),
];

pub const PREDICTIVE: &[Key] = &[
    k("mode", OneOf(&["act", "forecast_only"]), "\"act\"", "Act on the forecast, or only record what it would do."),
    k("buffer_s", Secs, "5m", "Look this far past one boot latency."),
    k("bucket_s", Secs, "10m", "Width of a demand bucket."),
];

pub const POOL: &[Key] = &[
    k("name", Str, "", "The pool's name."),
    k("market", OneOf(MARKETS), "", "Where its nodes come from and how they are paid."),
    k("nodes", Tables(FIXED_NODES), "[]", "Fixed pools: the nodes."),
    k("gpu_usd_per_hour", Float, "0", "Fixed pools: amortized price per GPU-hour."),
    k("instance_types", List(&Str), "[]", "Cloud pools: allowed instance types, preferred first."),
    k("min_nodes", Int, "0", "Nodes kept at all times."),
    k("max_nodes", Int, "0", "Most nodes at once (a cloud pool needs at least 1)."),
    k("boot_latency_s", Secs, "4m", "Expected launch-to-ready time."),
    k("idle_timeout_s", Secs, "10m", "An idle node is removed after this."),
    k("scale_out_cooldown_s", Secs, "10s", "Wait after a scale-out before the next."),
    k("scale_in_cooldown_s", Secs, "60s", "Wait after any resize before a scale-in."),
    k("max_step_fraction", Float, "0.5", "Largest scale-out per action, as a share of the pool's nodes."),
    k("min_step_nodes", Int, "2", "A scale-out may always add this many (growth from zero)."),
    k("scale_in_protection", Bool, "false", "Protect every node from scale-in."),
    k("capacity", Named(&Int), "unlimited", "Simulator: most nodes per instance type the cloud runs."),
    k("launch_failure_rate", Float, "0", "Simulator: share of launches that fail."),
    k("boot_jitter", Float, "0.25", "Simulator: log-normal sigma of boot latency."),
    k("interruption_notice_s", Secs, "2m", "Spot: notice before a reclaim (AWS 120 s, GCP/Azure 30 s)."),
    k("interruption_rate_per_hour", Float, "0", "Simulator: interruptions per spot node-hour."),
    k("target_gpu_utilization", Float, "none", "Target tracking: hold average utilization at this share."),
    k("utilization_warmup_s", Secs, "5m", "A new node's utilization counts after this."),
    k("utilization_query", Str, "none (agents' samples)", "PromQL query for utilization (needs `[prometheus]`)."),
    k("step_scaling", Tables(STEP_BAND), "[]", "Step-scaling bands on utilization."),
    k("predictive", Table(PREDICTIVE), "none", "Predictive scaling from a demand forecast."),
    k("scheduler", OneOf(&["spillway", "slurm"]), "\"spillway\"", "Who asks for its nodes."),
    k("region", Str, "none", "Cloud region of its nodes; moves from other regions pay `[network]` egress."),
    k(
        "zone",
        Str,
        "none",
        "Zone within the region: the AWS provider launches the pool's nodes there and prices its spot by it (moves between zones are free).",
    ),
    k("spot_usd_per_hour", Named(&Float), "the type's", "Spot: this pool's own price per node-hour by type."),
];

pub const EGRESS: &[Key] = &[
    k("from", Str, "", "Region the data leaves."),
    k("to", Str, "", "Region it enters."),
    k("usd_per_gb", Float, "", "Price per GB moved."),
];

pub const NETWORK: &[Key] = &[
    k("egress_usd_per_gb", Float, "0.02", "Price per GB between regions no entry or AWS price names."),
    k("transfer_gbps", Float, "10", "Bandwidth a job's data moves at between regions (Gbit/s)."),
    k("move_overhead_s", Secs, "0", "Time added to every move between regions besides the transfer."),
    k("egress", Tables(EGRESS), "AWS's prices", "Prices per region pair, over AWS's built-in ones."),
];

pub const SCHEDULE: &[Key] = &[
    k("pool", Str, "", "The pool it sets."),
    k("cron", Str, "", "Five-field cron expression: when the window opens."),
    k("timezone", Str, "\"UTC\"", "IANA time zone of the cron expression."),
    k("duration_s", Secs, "", "How long the window stays open."),
    k("min_nodes", Int, "none", "The pool keeps at least this many in the window."),
    k("max_nodes", Int, "none", "The pool holds at most this many in the window."),
    k("desired_nodes", Int, "none", "The pool is brought to at least this many when it opens."),
];

pub const POLICY: &[Key] = &[
    k("preemption", Bool, "true", "Higher tiers may preempt lower, preemptible ones."),
    k("backfill", Bool, "true", "Small jobs may use nodes held for a larger waiting job."),
    k("scan_limit", Int, "5000", "Most queued jobs examined per pass."),
    k("max_reservations", Int, "8", "Most blocked jobs holding nodes back per pass."),
    k("preemption_node_limit", Int, "256", "Most nodes examined per job for preemption victims."),
    k("spot_share", Float, "none (spot first)", "Target share of spot among cloud GPUs of interruptible work."),
    k("max_offering_share", Float, "1.0", "Most of a spot pool one instance type may hold."),
    k("deadline_margin_s", Secs, "10m", "Slack a deadline job keeps before moving to on-demand (safe policy)."),
    k("deadline_policy", OneOf(&["safe", "greedy"]), "\"safe\"", "How deadline jobs leave spot."),
    k(
        "deadline_reserve_trips",
        Int,
        "4",
        "Trips to on-demand and back to spot a safe deadline job keeps slack for (0: on-demand for good).",
    ),
    k(
        "interruption_backoff_after",
        Int,
        "2",
        "Interruptions of one offering in an hour that back it off (30 s doubling, at most 3 min).",
    ),
    k("elastic_resize_interval_s", Secs, "10m", "Least time between an elastic job's start and its growth."),
];

pub const BUDGET: &[Key] = &[
    k("team", Str, "", "The team it limits."),
    k("period", OneOf(&["day", "month"]), "", "UTC day or month."),
    k("usd", Float, "", "USD the team may spend per period."),
    k("hard_cap", Bool, "false", "Once spent, buy no cloud capacity for the team."),
    k("alert_at", List(&Float), "[0.5, 0.8, 1.0]", "Shares of `usd` that raise an alert."),
];

pub const ALERTS: &[Key] = &[k("webhook", Str, "none", "http:// URL that gets each alert as a JSON POST.")];

pub const PROMETHEUS: &[Key] = &[
    k("url", Str, "", "The Prometheus server (http://)."),
    k("timeout_s", Secs, "10s", "Most time one query may take."),
    k("interval_s", Secs, "30s", "How often each pool's query runs."),
    k("node_label", Str, "\"spillway_node\"", "Result label naming a node by its id."),
];

/// The file's top-level tables.
pub const TOP: &[Key] = &[
    k("cluster", Table(CLUSTER), "", "Cluster identity and the simulator's calendar."),
    k("tiers", Named(&Table(TIER)), "p0, p1, p2", "Tiers; a key left out takes the built-in tier's value."),
    k("teams", Tables(TEAM), "[]", "Teams, their quotas and weights."),
    k("instance_types", Tables(INSTANCE_TYPE), "[]", "Cloud instance types and prices."),
    k("pools", Tables(POOL), "[]", "Pools of one market each."),
    k("schedules", Tables(SCHEDULE), "[]", "Cron windows that set a pool's bounds."),
    k("policy", Table(POLICY), "", "Engine-wide switches and limits."),
    k("quotas", Tables(QUOTA), "[]", "Account limits on cloud capacity."),
    k("budgets", Tables(BUDGET), "[]", "Team budgets per UTC day or month (docs/budgets.md)."),
    k("alerts", Table(ALERTS), "", "Where budget alerts go."),
    k("prometheus", Table(PROMETHEUS), "none", "The server pools' `utilization_query` reads (docs/metrics.md)."),
    k("provider", Free("docs/aws.md"), "local", "Where nodes come from: `kind = \"local\"` or `\"aws\"`."),
    k("slurm", Free("docs/slurm.md"), "none", "Slurm's node sets and partitions."),
    k("network", Table(NETWORK), "", "Egress prices and bandwidth between regions."),
];

/// Returns a kind as the reference and errors name it.
pub fn kind_name(kind: &Kind) -> String {
    match kind {
        Int => "integer >= 0".into(),
        SignedInt => "integer".into(),
        Float => "number".into(),
        Bool => "boolean".into(),
        Str => "string".into(),
        Secs => "duration (seconds, or \"90s\", \"5m\", \"2h\")".into(),
        OneOf(v) => format!("one of {}", v.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")),
        List(inner) => format!("list of {}", kind_name(inner)),
        Table(_) => "table".into(),
        Tables(_) => "list of tables".into(),
        Named(inner) => format!("table of named {}s", kind_name(inner)),
        Free(doc) => format!("table (see {doc})"),
    }
}

/// Returns `docs/config.md`: every table and key with its type, default and meaning.
pub fn reference() -> String {
    let mut out = String::from(
        "# Configuration reference\n\nEvery key of the cluster config (TOML). Written by `spillway config reference`; \
         a test keeps it equal to the config types. Durations take seconds or a string with units (`\"90s\"`, \
         `\"5m\"`, `\"2h\"`, `\"1h30m\"`). `spillway config check FILE` reports every unknown key and wrong type \
         at once; `spillway config show --effective FILE` prints a config with every default filled in.\n",
    );
    for top in TOP {
        section(&mut out, top.name, top);
    }
    out
}

/// Appends the section of `key` (at `path`) and of the tables nested in it.
fn section(out: &mut String, path: &str, key: &Key) {
    let (header, keys) = match key.kind {
        Table(keys) => (format!("[{path}]"), keys),
        Tables(keys) => (format!("[[{path}]]"), keys),
        Named(Table(keys)) => (format!("[{path}.<name>]"), *keys),
        Free(doc) => {
            out.push_str(&format!("\n## `[{path}]`\n\n{} Default: {}. Its keys: {doc}.\n", key.doc, key.default));
            return;
        }
        _ => return,
    };
    out.push_str(&format!("\n## `{header}`\n\n{}\n\n| key | type | default | meaning |\n|---|---|---|---|\n", key.doc));
    for k in keys {
        let default = if k.default.is_empty() { "required".to_string() } else { k.default.to_string() };
        out.push_str(&format!("| `{}` | {} | {} | {} |\n", k.name, kind_name(&k.kind), default, k.doc));
    }
    for k in keys {
        if matches!(k.kind, Table(_) | Tables(_)) {
            section(out, &format!("{path}.{}", k.name), k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{Deserialize, Deserializer, Error as _, Visitor};

    /// A deserializer that only records the field names a derived `Deserialize` of a struct asks for.
    struct Lister<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Lister<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Self::Error::custom("listed"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }

    fn fields<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
        let mut got: &'static [&'static str] = &[];
        let _ = T::deserialize(Lister(&mut got));
        let mut v = got.to_vec();
        v.sort();
        v
    }

    fn names(keys: &[Key]) -> Vec<&'static str> {
        let mut v: Vec<&str> = keys.iter().map(|k| k.name).collect();
        v.sort();
        v
    }

    #[test]
    fn the_schema_lists_exactly_the_keys_of_the_config_types() {
        use super::super::*;
        let pairs: Vec<(&str, Vec<&str>, &[Key])> = vec![
            ("top", fields::<RawConfig>(), TOP),
            ("cluster", fields::<ClusterSection>(), CLUSTER),
            ("tiers", fields::<TierSpec>(), TIER),
            ("teams", fields::<Team>(), TEAM),
            ("instance_types", fields::<InstanceType>(), INSTANCE_TYPE),
            ("quotas", fields::<Quota>(), QUOTA),
            ("pools.nodes", fields::<FixedNodes>(), FIXED_NODES),
            ("pools.step_scaling", fields::<StepBandConfig>(), STEP_BAND),
            ("pools.predictive", fields::<PredictiveConfig>(), PREDICTIVE),
            ("pools", fields::<Pool>(), POOL),
            ("schedules", fields::<Schedule>(), SCHEDULE),
            ("policy", fields::<Policy>(), POLICY),
            ("budgets", fields::<Budget>(), BUDGET),
            ("alerts", fields::<Alerts>(), ALERTS),
            ("prometheus", fields::<Prometheus>(), PROMETHEUS),
            ("network", fields::<Network>(), NETWORK),
            ("network.egress", fields::<EgressPrice>(), EGRESS),
        ];
        for (what, serde_keys, schema) in pairs {
            assert!(!serde_keys.is_empty(), "{what}: no fields listed");
            assert_eq!(serde_keys, names(schema), "{what}: the schema and the serde type disagree");
        }
    }

    #[test]
    fn docs_config_md_is_the_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == reference(),
            "docs/config.md is out of date: run `cargo run --release -p spillway -- config reference > docs/config.md`"
        );
    }
}
