//! PromQL as a pool's utilization signal (`[prometheus]` and a pool's `utilization_query`): the daemon's shell
//! asks the Prometheus server every `interval_s` and hands the answer to the engine as
//! [`crate::Event::PoolMetric`]; the engine never talks to Prometheus.

use super::validate::Ctx;
use super::{ConfigError, Pool, secs};
use serde::Deserialize;

/// The Prometheus server that pools with a `utilization_query` read their signal from.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prometheus {
    /// Its base URL (`http://prometheus:9090`); the query goes to `<url>/api/v1/query`.
    pub url: String,
    /// How long one query may take before it counts as failed.
    #[serde(default = "default_timeout_s", deserialize_with = "secs::de")]
    pub timeout_s: f64,
    /// How often each pool's query runs.
    #[serde(default = "default_interval_s", deserialize_with = "secs::de")]
    pub interval_s: f64,
    /// The label of a query's result that names a node by its id (`spillway nodes ls`); a result without it is
    /// one value for the whole pool.
    #[serde(default = "default_node_label")]
    pub node_label: String,
}

fn default_timeout_s() -> f64 {
    10.0
}

fn default_interval_s() -> f64 {
    30.0
}

fn default_node_label() -> String {
    "spillway_node".into()
}

/// Checks `[prometheus]` and the pools' `utilization_query`: a query needs the table and a policy that reads it
/// (target tracking or step scaling), and is not empty; the URL is http with a host; the timeout is under the
/// interval, so queries never pile up.
pub(super) fn check(cx: &Ctx, prom: Option<&Prometheus>, pools: &[Pool]) -> Result<(), ConfigError> {
    for (i, p) in pools.iter().enumerate() {
        let Some(q) = &p.utilization_query else { continue };
        if q.trim().is_empty() {
            return Err(cx.err("pools", Some(i), "utilization_query", "is empty".into()));
        }
        if prom.is_none() {
            let what = "needs a [prometheus] table with the server's `url`".into();
            return Err(cx.err("pools", Some(i), "utilization_query", what));
        }
        if p.market == super::Market::Fixed {
            let what = "is for cloud pools; a fixed pool's nodes do not scale".into();
            return Err(cx.err("pools", Some(i), "utilization_query", what));
        }
        if !p.uses_utilization() {
            let what = "is read only by `target_gpu_utilization` or `step_scaling`; the pool has neither".into();
            return Err(cx.err("pools", Some(i), "utilization_query", what));
        }
    }
    let Some(prom) = prom else { return Ok(()) };
    // A password in the URL would reach every error message (and so the event log); a query or fragment would
    // swallow the API path appended to it.
    if prom.url.contains(['@', '?', '#']) {
        let what = "must be the server's base URL, without a user, query or fragment (`http://host:9090/prefix`)";
        return Err(cx.err("prometheus", None, "url", what.into()));
    }
    if !super::budget::http_url_ok(&prom.url) {
        let what = format!(
            "{:?} is not an http:// URL with a host (and a port up to 65535); https is not supported yet",
            prom.url
        );
        return Err(cx.err("prometheus", None, "url", what));
    }
    if !(prom.interval_s >= 1.0 && prom.interval_s <= 86_400.0) {
        return Err(cx.err("prometheus", None, "interval_s", "must be between 1 s and 1 day".into()));
    }
    if !(prom.timeout_s > 0.0 && prom.timeout_s <= prom.interval_s) {
        return Err(cx.err("prometheus", None, "timeout_s", "must be > 0 and at most `interval_s`".into()));
    }
    let label_ok = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !label_ok(&prom.node_label) || prom.node_label.starts_with("__") {
        let what = format!(
            "{:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with `__`)",
            prom.node_label
        );
        return Err(cx.err("prometheus", None, "node_label", what));
    }
    Ok(())
}
