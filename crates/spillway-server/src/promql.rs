//! PromQL as a pool's utilization signal (`[prometheus]`, a pool's `utilization_query`): every `interval_s` the
//! daemon runs each such pool's query against Prometheus's HTTP API (`GET /api/v1/query`, with the timeout) and
//! hands the engine what it found as [`Event::PoolMetric`]: a share per ready node of the pool, or why there is
//! none. The engine decides what a missing signal means (the pool holds its size; it never scales in).
//!
//! A result series names its node with the `node_label` label (the node's id, as `spillway nodes ls` shows it);
//! series for nodes of other pools are ignored. A query that aggregates to one series without that label gives
//! one value for the whole pool. Values must be shares in [0, 1] (DCGM's `DCGM_FI_DEV_GPU_UTIL` is a percentage:
//! divide it by 100).

use crate::daemon::Shared;
use crate::store::Entry;
use spillway_core::config::Prometheus;
use spillway_core::{Event, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The most bytes of a query's answer read (a pool's series, one per node, fit many times over).
const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// One series of an instant query's answer: the node it names (if it has the node label) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub node: Option<String>,
    pub value: f64,
}

/// Runs `query` against the Prometheus at `base` and returns its series, or why it gave none (no answer in
/// time, an HTTP error, Prometheus's own error, an answer of the wrong shape).
pub fn run_query(agent: &ureq::Agent, base: &str, query: &str, node_label: &str) -> Result<Vec<Series>, String> {
    let url = format!("{}/api/v1/query", base.trim_end_matches('/'));
    let mut res = agent.get(&url).query("query", query).call().map_err(|e| format!("asking {url}: {e}"))?;
    let status = res.status().as_u16();
    let body = res
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_string()
        .map_err(|e| format!("reading the answer of {url}: {e}"))?;
    match parse_answer(&body, node_label) {
        Err(e) if status != 200 => Err(format!("{url}: HTTP {status}: {e}")),
        other => other,
    }
}

/// Parses Prometheus's answer to an instant query (a vector or a scalar) into series; an error answer names
/// Prometheus's error type and message.
pub fn parse_answer(body: &str, node_label: &str) -> Result<Vec<Series>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if v.get("status").and_then(|s| s.as_str()) != Some("success") {
        let kind = v.get("errorType").and_then(|s| s.as_str()).unwrap_or("unknown");
        let msg = v.get("error").and_then(|s| s.as_str()).unwrap_or("no error message");
        return Err(format!("Prometheus says {kind}: {}", short(msg)));
    }
    let data = v.get("data").ok_or("the answer has no `data`")?;
    let result = data.get("result").ok_or("the answer has no `data.result`")?;
    match data.get("resultType").and_then(|s| s.as_str()) {
        Some("scalar") => Ok(vec![Series { node: None, value: sample_value(result)? }]),
        Some("vector") => {
            let rows = result.as_array().ok_or("`data.result` is not a list")?;
            rows.iter()
                .map(|r| {
                    let node = r.get("metric").and_then(|m| m.get(node_label)).and_then(|n| n.as_str());
                    let value = sample_value(r.get("value").unwrap_or(&serde_json::Value::Null))?;
                    Ok(Series { node: node.map(str::to_string), value })
                })
                .collect()
        }
        other => Err(format!(
            "the query returns a {}, not an instant vector or a scalar",
            other.unwrap_or("result of no type")
        )),
    }
}

/// Reads a `[timestamp, "value"]` pair's value.
fn sample_value(v: &serde_json::Value) -> Result<f64, String> {
    let s = v.get(1).and_then(|s| s.as_str()).ok_or("a sample is not a [time, \"value\"] pair")?;
    s.parse::<f64>().map_err(|_| format!("sample value {:?} is not a number", short(s)))
}

/// Cuts `s` to a length fit for one log line.
fn short(s: &str) -> String {
    let s: String = s.chars().filter(|c| !c.is_control()).take(200).collect();
    s
}

/// Returns each of `ready`'s nodes' share from `series` (`ready` ascending, as the pool's index keeps it), or why
/// the answer cannot be used: a value that is not a share in [0, 1], two series for one node, or several series
/// none of which names a node.
pub fn node_shares(series: &[Series], ready: &[u32]) -> Result<Vec<(NodeId, f64)>, String> {
    let check = |what: &str, v: f64| {
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            let hint = if v > 1.0 && v <= 100.0 { " (divide a percentage by 100)" } else { "" };
            Err(format!("{what}: {v} is not a share in [0, 1]{hint}"))
        }
    };
    if let [Series { node: None, value }] = series {
        let v = check("the pool's value", *value)?;
        return Ok(ready.iter().map(|&n| (NodeId(n), v)).collect());
    }
    let mut found: BTreeMap<u32, f64> = BTreeMap::new();
    for s in series {
        let Some(name) = &s.node else {
            return Err(format!(
                "{} series, and one has no node label: aggregate by it (`avg by (<node label>) (...)`) or to one \
                 value (`avg(...)`)",
                series.len()
            ));
        };
        // A node's id as the API spells it (`7`, not `07` or `+7`, which would count twice).
        let Some(n) = name.parse::<u32>().ok().filter(|n| n.to_string() == *name && ready.binary_search(n).is_ok())
        else {
            continue;
        };
        if found.insert(n, check(&format!("node {n}"), s.value)?).is_some() {
            return Err(format!("two series for node {n}: aggregate by the node label"));
        }
    }
    Ok(found.into_iter().map(|(n, v)| (NodeId(n), v)).collect())
}

impl Shared {
    /// Starts the loop that runs the pools' utilization queries every `interval_s`, when the config has a
    /// `[prometheus]` table and a pool with a query.
    pub fn prometheus_loop(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let prom = {
            let st = self.state();
            let cfg = st.engine.config();
            cfg.prometheus.clone().filter(|_| cfg.pools.iter().any(|p| p.utilization_query.is_some()))?
        };
        let me = self.clone();
        Some(tokio::spawn(async move {
            let agent = client(&prom);
            let every = Duration::from_secs_f64(prom.interval_s);
            let mut last = BTreeMap::new();
            loop {
                let (p, prom, agent) = (me.clone(), prom.clone(), agent.clone());
                let polled = tokio::task::spawn_blocking(move || {
                    p.poll_prometheus(&prom, &agent, &mut last);
                    last
                });
                match polled.await {
                    Ok(l) => last = l,
                    Err(_) => return,
                }
                tokio::time::sleep(every).await;
            }
        }))
    }

    /// Runs every pool's utilization query once and hands the answers to the engine, except an error equal to the
    /// one `last` holds for the pool (it changes nothing, and would only grow the log while Prometheus is down).
    /// Prints each change of a pool's signal (missing, why, back) as the engine sees it.
    pub fn poll_prometheus(
        self: &Arc<Self>,
        prom: &Prometheus,
        agent: &ureq::Agent,
        last: &mut BTreeMap<usize, String>,
    ) {
        let queries: Vec<(usize, String)> = {
            let st = self.state();
            let pools = &st.engine.config().pools;
            pools.iter().enumerate().filter_map(|(i, p)| Some((i, p.utilization_query.clone()?))).collect()
        };
        for (pool, query) in queries {
            let answer = run_query(agent, &prom.url, &query, &prom.node_label);
            let mut st = self.state();
            let ready: Vec<u32> = st.engine.cluster().pools[pool].ready.iter().map(|n| n.0).collect();
            let (samples, error) = match answer.and_then(|s| node_shares(&s, &ready)) {
                Ok(samples) => (samples, None),
                Err(e) => (Vec::new(), Some(e)),
            };
            match &error {
                Some(e) if last.get(&pool) == Some(e) => continue,
                Some(e) => last.insert(pool, e.clone()),
                None => last.remove(&pool),
            };
            let before = st.engine.utilization_signal(pool).map(str::to_string);
            let now = self.now();
            if let Err(e) = st.observe(now, Entry::Event(Event::PoolMetric { pool, samples, error })) {
                eprintln!("spillway: utilization query: {e}");
            }
            let after = st.engine.utilization_signal(pool);
            if before.as_deref() != after {
                let name = &st.engine.config().pools[pool].name;
                match after {
                    Some(why) => eprintln!("spillway: pool {name}: utilization signal missing (no scale-in): {why}"),
                    None => eprintln!("spillway: pool {name}: utilization signal is back"),
                }
            }
            self.check_fatal(&st);
            drop(st);
            self.flush();
        }
    }
}

/// Returns the HTTP client for `prom`'s queries (its timeout; error statuses are answers to read, not errors).
pub fn client(prom: &Prometheus) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs_f64(prom.timeout_s)))
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(node: Option<&str>, value: f64) -> Series {
        Series { node: node.map(str::to_string), value }
    }

    #[test]
    fn answers_parse_as_vectors_scalars_or_errors() {
        let v = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"spillway_node":"3","gpu":"0"},"value":[1.5,"0.25"]},
            {"metric":{},"value":[1.5,"NaN"]}]}}"#;
        let got = parse_answer(v, "spillway_node").unwrap();
        assert_eq!(got[0], s(Some("3"), 0.25));
        assert!(got[1].node.is_none() && got[1].value.is_nan());
        let sc = r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"0.5"]}}"#;
        assert_eq!(parse_answer(sc, "n").unwrap(), vec![s(None, 0.5)]);
        let err = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert_eq!(parse_answer(err, "n").unwrap_err(), "Prometheus says bad_data: parse error at char 4");
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(parse_answer(matrix, "n").unwrap_err().contains("not an instant vector"));
        for bad in [
            "",
            "<html>",
            r#"{"status":"success"}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,2]}]}}"#,
        ] {
            assert!(parse_answer(bad, "n").is_err(), "{bad}");
        }
    }

    #[test]
    fn series_map_to_the_pools_ready_nodes() {
        let got = node_shares(&[s(Some("3"), 0.5), s(Some("9"), 0.1), s(Some("x"), 0.2)], &[3, 4]).unwrap();
        assert_eq!(got, vec![(NodeId(3), 0.5)]);
        let pool = node_shares(&[s(None, 0.7)], &[3, 4]).unwrap();
        assert_eq!(pool, vec![(NodeId(3), 0.7), (NodeId(4), 0.7)]);
        assert!(node_shares(&[s(Some("3"), 87.0)], &[3]).unwrap_err().contains("divide a percentage"));
        let nan = node_shares(&[s(Some("3"), f64::NAN)], &[3]).unwrap_err();
        assert!(nan.contains("NaN is not a share") && !nan.contains("percentage"), "{nan}");
        assert_eq!(node_shares(&[s(Some("03"), 0.5), s(Some("+3"), 0.5)], &[3]).unwrap(), vec![], "one spelling");
        assert!(node_shares(&[s(Some("3"), 0.1), s(Some("3"), 0.2)], &[3]).unwrap_err().contains("two series"));
        assert!(node_shares(&[s(None, 0.1), s(None, 0.2)], &[3]).unwrap_err().contains("aggregate"));
        assert_eq!(node_shares(&[], &[3]).unwrap(), vec![]);
    }
}
