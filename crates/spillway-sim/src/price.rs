//! Spot price traces for the simulator: the price of one offering (`POOL:INSTANCE_TYPE`) over time, replayed
//! into the engine as [`spillway_core::Event::SpotPrice`] for that pool, which bills every live node of the
//! offering at the price of the moment. Read from `simulate --spot-price POOL:TYPE=FILE` (a JSON file with
//! `metadata.gap_seconds` and a `prices` array, as SkyNomad's GCP set has beside its availability; or a CSV of
//! `seconds,usd_per_hour` rows, seconds from the trace start), and from the `prices` array of a `--spot-trace`
//! file. Traces shorter than a run repeat.

use crate::spot::SpotTraceError;
use spillway_core::Config;
use spillway_core::time::Millis;
use std::path::Path;

/// A price trace: from `steps[i].0` (ms from the trace start) on, `steps[i].1` USD per node-hour.
pub type PriceTrace = crate::spot::Steps<f64>;

/// A price trace bound to an offering by name.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferingPrice {
    pub pool: String,
    pub instance_type: String,
    pub trace: PriceTrace,
}

/// The dearest price per node-hour a trace may say.
const MAX_USD_PER_HOUR: f64 = 1.0e6;

/// Checks one price: a number in (0, [`MAX_USD_PER_HOUR`]].
fn price_of(x: &serde_json::Value) -> Option<f64> {
    x.as_f64().filter(|p| *p > 0.0 && *p <= MAX_USD_PER_HOUR)
}

/// Reads the `prices` array of spot-traces JSON text, one per tick of `metadata.gap_seconds`; `None` when the
/// file has none. `file` names it in errors.
pub fn parse_json(file: &str, text: &str) -> Result<Option<PriceTrace>, SpotTraceError> {
    let field =
        |field: &str, message: String| SpotTraceError::Field { file: file.into(), field: field.into(), message };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| field("(document)", format!("not JSON: {e}")))?;
    let Some(prices) = v.get("prices") else { return Ok(None) };
    let prices = prices.as_array().ok_or_else(|| field("prices", "not an array".into()))?;
    if prices.is_empty() {
        return Err(field("prices", "is empty".into()));
    }
    let gap = v.get("metadata").and_then(|m| m.get("gap_seconds")).and_then(|g| g.as_f64());
    // A price that changes more than once a second is a unit mistake (and a record per change).
    let gap = gap.filter(|g| g.is_finite() && *g >= 1.0).ok_or_else(|| {
        field("metadata.gap_seconds", "missing, or not a number of seconds >= 1 (prices need a tick)".into())
    })?;
    if let Some(n) = v.get("data").and_then(|d| d.as_array()).map(Vec::len).filter(|&n| n != prices.len()) {
        return Err(field("prices", format!("has {} ticks and `data` {n}: one price per tick", prices.len())));
    }
    if gap * prices.len() as f64 > 100.0 * 365.0 * 86_400.0 {
        return Err(field("metadata.gap_seconds", format!("{gap} s x {} ticks is over a century", prices.len())));
    }
    let gap_ms = (gap * 1000.0).round() as Millis;
    let mut steps: Vec<(Millis, f64)> = Vec::new();
    for (i, x) in prices.iter().enumerate() {
        let p = price_of(x)
            .ok_or_else(|| field(&format!("prices[{i}]"), format!("`{x}` is not a price in (0, 1000000] USD/h")))?;
        if steps.last().is_none_or(|s| s.1 != p) {
            steps.push((i as Millis * gap_ms, p));
        }
    }
    Ok(Some(PriceTrace { steps, period_ms: prices.len() as Millis * gap_ms }))
}

/// Parses a CSV of `seconds,usd_per_hour` rows (an optional `seconds,usd_per_hour` header; seconds from the trace
/// start, rising by at least a second). The last price holds for as long as the gap before it, then the trace
/// repeats.
pub fn parse_csv(file: &str, text: &str) -> Result<PriceTrace, SpotTraceError> {
    let mut steps: Vec<(Millis, f64)> = Vec::new();
    let mut last_gap = 1000;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |message: String| SpotTraceError::Line { file: file.into(), line: line_no, message };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if i == 0 && line.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            if cols != ["seconds", "usd_per_hour"] {
                return Err(err(format!("header `{line}`: expected `seconds,usd_per_hour`")));
            }
            continue;
        }
        let (t, p) = line.split_once(',').ok_or_else(|| err("expected `seconds,usd_per_hour`".into()))?;
        let t: f64 = t.trim().parse().map_err(|_| err(format!("`{t}` is not a number of seconds")))?;
        let p: f64 = p.trim().parse().map_err(|_| err(format!("`{p}` is not a price")))?;
        if !(t.is_finite() && (0.0..=100.0 * 365.0 * 86_400.0).contains(&t)) {
            return Err(err(format!("{t} s is outside 0 to a century")));
        }
        if !(p > 0.0 && p <= MAX_USD_PER_HOUR) {
            return Err(err(format!("{p:e} is not a price in (0, 1000000] USD/h")));
        }
        let t = (t * 1000.0).round() as Millis;
        if let Some(&(prev, _)) = steps.last() {
            if t < prev + 1000 {
                return Err(err(format!("time {} s is not a second or more after {} s", t / 1000, prev / 1000)));
            }
            last_gap = t - prev;
        }
        steps.push((t, p));
    }
    let end = steps.last().map(|s| s.0 + last_gap).ok_or_else(|| SpotTraceError::Line {
        file: file.into(),
        line: 1,
        message: "no prices".into(),
    })?;
    Ok(PriceTrace { steps, period_ms: end })
}

/// Resolves `POOL:INSTANCE_TYPE=FILE` against `cfg` (a spot pool that allows the type) and reads the file (CSV
/// when it ends in `.csv`, else JSON with a `prices` array).
pub fn resolve(cfg: &Config, arg: &str) -> Result<OfferingPrice, SpotTraceError> {
    let bad = |message: String| SpotTraceError::PriceOffering { arg: arg.into(), message };
    let (offering, file) = arg.split_once('=').ok_or_else(|| bad("expected POOL:INSTANCE_TYPE=FILE".into()))?;
    let (pool, it) =
        offering.split_once(':').ok_or_else(|| bad(format!("offering `{offering}` is not POOL:INSTANCE_TYPE")))?;
    crate::spot::check_offering(cfg, pool, it).map_err(bad)?;
    let path = Path::new(file);
    let text = crate::trace::read_text(path).map_err(|e| bad(format!("reading {}: {e}", path.display())))?;
    let trace = if file.ends_with(".csv") {
        parse_csv(file, &text)?
    } else {
        parse_json(file, &text)?.ok_or_else(|| SpotTraceError::Field {
            file: file.into(),
            field: "prices".into(),
            message: "missing: a price trace is a `prices` array (or a CSV of seconds,usd_per_hour)".into(),
        })?
    };
    Ok(OfferingPrice { pool: pool.into(), instance_type: it.into(), trace })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_price_trace_steps_at_its_changes_and_repeats() {
        let t = parse_json("g.json", r#"{"metadata": {"gap_seconds": 60}, "data": [0, 0, 0], "prices": [2, 2, 3]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t.steps, vec![(0, 2.0), (120_000, 3.0)]);
        assert_eq!(t.at(0), (2.0, 120_000));
        assert_eq!(t.at(200_000), (2.0, 300_000), "it repeats after 3 ticks");
        assert_eq!(t.shifted(120_000).at(0).0, 3.0);
        assert!(parse_json("n.json", r#"{"metadata": {"gap_seconds": 60}, "data": [1]}"#).unwrap().is_none());
        let bad = parse_json("b.json", r#"{"metadata": {"gap_seconds": 60}, "prices": [1, -2]}"#).unwrap_err();
        assert!(bad.to_string().contains("prices[1]"), "{bad}");
        let short = r#"{"metadata": {"gap_seconds": 60}, "data": [0, 0], "prices": [1]}"#;
        assert!(parse_json("s.json", short).unwrap_err().to_string().contains("one price per tick"));
        let fast = r#"{"metadata": {"gap_seconds": 0.001}, "prices": [1, 2]}"#;
        assert!(parse_json("f.json", fast).unwrap_err().to_string().contains("gap_seconds"));
    }

    #[test]
    fn a_csv_price_trace_needs_rising_times_and_positive_prices() {
        let t = parse_csv("p.csv", "seconds,usd_per_hour\n0,4.5\n3600,3.0\n").unwrap();
        assert_eq!((t.steps.clone(), t.period_ms), (vec![(0, 4.5), (3_600_000, 3.0)], 7_200_000));
        let e = parse_csv("p.csv", "0,1\n0,2\n").unwrap_err().to_string();
        assert!(e.contains("p.csv:2") && e.contains("not a second or more after"), "{e}");
        let e = parse_csv("p.csv", "usd_per_hour,seconds\n1,0\n").unwrap_err().to_string();
        assert!(e.contains("p.csv:1") && e.contains("header"), "{e}");
        assert!(parse_csv("p.csv", "0,1e300\n").is_err());
        assert!(parse_csv("p.csv", "0,nan\n").unwrap_err().to_string().contains("p.csv:1"));
        assert!(parse_csv("p.csv", "").is_err());
    }
}
