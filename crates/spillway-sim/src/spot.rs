//! Spot capacity models for the simulator: replays of availability traces (the `spot-traces` JSON format) and of
//! Bamboo's add/remove event logs, mapped to offerings (`POOL:INSTANCE_TYPE`). A trace says how many nodes of
//! an offering the cloud lets live at each moment; when it drops below the nodes alive, the newest get an
//! interruption notice, and launches fail while it is at its limit. Traces shorter than a run repeat.
//!
//! JSON traces whose values are all 0 or 1 are availability traces. Their polarity says which value means
//! "obtainable" (no count limit) and which means none (every running node of the offering is interrupted): the
//! AWS `spot-traces` sets write 1 for obtainable, SkyNomad's GCP set 1 for not obtainable. A file may say which
//! in `metadata.polarity` (`"available"`: 1 is obtainable; `"unavailable"`: 1 is not); where it does not, the
//! caller's default holds (`simulate --spot-trace-polarity`, itself `available` by default). Other JSON traces
//! (the preemption sets) and Bamboo logs are counts of nodes alive.

use spillway_core::Config;
use spillway_core::time::Millis;
use std::path::Path;

/// A step function of time: from `steps[i].0` (ms from the trace start) on, the value is `steps[i].1`; before the
/// first step, the value's default. Repeats every `period_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps<T> {
    pub steps: Vec<(Millis, T)>,
    pub period_ms: Millis,
}

/// A capacity trace: at most `steps[i].1` nodes of an offering (`None`: no limit).
pub type SpotTrace = Steps<Option<u32>>;

/// Errors reading a spot trace or mapping it to an offering; each names the file and the field or line.
#[derive(Debug, thiserror::Error)]
pub enum SpotTraceError {
    #[error("reading spot trace {file}: {message}")]
    Io { file: String, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field { file: String, field: String, message: String },
    #[error("{file}:{line}: {message}")]
    Line { file: String, line: usize, message: String },
    #[error("--spot-trace {arg}: {message}")]
    Offering { arg: String, message: String },
    #[error("--spot-price {arg}: {message}")]
    PriceOffering { arg: String, message: String },
}

impl<T: Copy + PartialEq + Default> Steps<T> {
    /// Returns the value at `t_ms` from the trace start (a capacity, a price), and when it next changes.
    pub fn at(&self, t_ms: Millis) -> (T, Millis) {
        let period = self.period_ms.max(1);
        let cycle = t_ms.div_euclid(period);
        let off = t_ms.rem_euclid(period);
        let i = self.steps.partition_point(|&(s, _)| s <= off).saturating_sub(1);
        let value = self.steps.get(i).map(|s| s.1).unwrap_or_default();
        let next = match self.steps.get(i + 1) {
            Some(&(s, _)) => cycle * period + s,
            None => (cycle + 1) * period + self.steps.first().map_or(0, |s| s.0),
        };
        (value, next.max(t_ms + 1))
    }

    /// Returns this trace as seen from `offset_ms` into it: the value at `t` is this trace's at `t + offset_ms`
    /// (it still repeats), so one trace gives many start windows.
    pub fn shifted(&self, offset_ms: Millis) -> Steps<T> {
        let period = self.period_ms.max(1);
        let off = offset_ms.rem_euclid(period);
        let mut steps: Vec<(Millis, T)> = vec![(0, self.at(off).0)];
        let mut moved: Vec<(Millis, T)> =
            self.steps.iter().map(|&(s, v)| ((s - off).rem_euclid(period), v)).filter(|&(t, _)| t > 0).collect();
        moved.sort_by_key(|&(t, _)| t);
        for (t, v) in moved {
            if steps.last().is_none_or(|s| s.1 != v) {
                steps.push((t, v));
            }
        }
        Steps { steps, period_ms: period }
    }
}

/// Which value of a 0/1 availability trace means a spot node can be had (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Polarity {
    /// 1: obtainable, 0: none (the AWS `spot-traces` sets).
    #[default]
    Available,
    /// 1: not obtainable (preempted or unavailable), 0: obtainable (SkyNomad's GCP set).
    Unavailable,
}

impl std::str::FromStr for Polarity {
    type Err = String;
    fn from_str(s: &str) -> Result<Polarity, String> {
        match s {
            "available" => Ok(Polarity::Available),
            "unavailable" => Ok(Polarity::Unavailable),
            other => {
                Err(format!("`{other}` is neither `available` (1 means obtainable) nor `unavailable` (1 means not)"))
            }
        }
    }
}

/// Reads a `spot-traces` JSON file: `{"metadata": {"gap_seconds": N}, "data": [v0, v1, ...]}`; `polarity` holds
/// for a 0/1 trace whose file does not say its own.
pub fn load_json(path: &Path, polarity: Polarity) -> Result<SpotTrace, SpotTraceError> {
    let file = path.display().to_string();
    let text = crate::trace::read_text(path).map_err(|message| SpotTraceError::Io { file: file.clone(), message })?;
    parse_json(&file, &text, polarity)
}

/// Parses spot-traces JSON text; `file` names it in errors; `polarity` holds for a 0/1 trace whose
/// `metadata.polarity` does not say.
pub fn parse_json(file: &str, text: &str, polarity: Polarity) -> Result<SpotTrace, SpotTraceError> {
    let field =
        |field: &str, message: String| SpotTraceError::Field { file: file.into(), field: field.into(), message };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| field("(document)", format!("not JSON: {e}")))?;
    let gap = v
        .get("metadata")
        .and_then(|m| m.get("gap_seconds"))
        .ok_or_else(|| field("metadata.gap_seconds", "missing".into()))?
        .as_f64()
        .ok_or_else(|| field("metadata.gap_seconds", "not a number".into()))?;
    // A tick under a millisecond, or a trace longer than a century, is a unit mistake (and would round to 0 ms or
    // overflow the clock).
    if !(gap.is_finite() && gap >= 0.001) {
        return Err(field("metadata.gap_seconds", format!("must be at least 0.001 s, got {gap}")));
    }
    let data =
        v.get("data").and_then(|d| d.as_array()).ok_or_else(|| field("data", "missing or not an array".into()))?;
    if data.is_empty() {
        return Err(field("data", "is empty".into()));
    }
    if gap * data.len() as f64 > 100.0 * 365.0 * 86_400.0 {
        return Err(field("metadata.gap_seconds", format!("{gap} s x {} ticks is over a century", data.len())));
    }
    let mut values = Vec::with_capacity(data.len());
    for (i, x) in data.iter().enumerate() {
        let n = x
            .as_f64()
            .filter(|n| *n >= 0.0 && n.fract() == 0.0 && *n <= f64::from(u32::MAX))
            .ok_or_else(|| field(&format!("data[{i}]"), format!("`{x}` is not a count from 0 to {}", u32::MAX)))?;
        values.push(n as u32);
    }
    let binary = values.iter().all(|&n| n <= 1);
    let polarity = match v.get("metadata").and_then(|m| m.get("polarity")) {
        None => polarity,
        // A count above 1 makes it a count trace, whose 1 means one node alive: the polarity of a 0/1 file that
        // has a stray count would be turned around without a word.
        Some(_) if !binary => {
            return Err(field(
                "metadata.polarity",
                "is only for 0/1 availability traces; this one counts nodes".into(),
            ));
        }
        Some(p) => p
            .as_str()
            .ok_or_else(|| "not a string".to_string())
            .and_then(str::parse)
            .map_err(|m| field("metadata.polarity", m))?,
    };
    let gap_ms = (gap * 1000.0).round() as Millis;
    let mut steps: Vec<(Millis, Option<u32>)> = Vec::new();
    for (i, &n) in values.iter().enumerate() {
        let obtainable = match polarity {
            Polarity::Available => n == 1,
            Polarity::Unavailable => n == 0,
        };
        let cap = if !binary {
            Some(n)
        } else if obtainable {
            None
        } else {
            Some(0)
        };
        if steps.last().is_none_or(|s| s.1 != cap) {
            steps.push((i as Millis * gap_ms, cap));
        }
    }
    Ok(SpotTrace { steps, period_ms: values.len() as Millis * gap_ms })
}

/// Reads a Bamboo event log (`time_ms,add|remove,nodeN`): the capacity is the number of nodes added and not
/// yet removed.
pub fn load_bamboo(path: &Path) -> Result<SpotTrace, SpotTraceError> {
    let file = path.display().to_string();
    let text = crate::trace::read_text(path).map_err(|message| SpotTraceError::Io { file: file.clone(), message })?;
    parse_bamboo(&file, &text)
}

/// Parses a Bamboo event log; `file` names it in errors.
pub fn parse_bamboo(file: &str, text: &str) -> Result<SpotTrace, SpotTraceError> {
    let mut live: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut steps: Vec<(Millis, Option<u32>)> = Vec::new();
    let mut t0: Option<Millis> = None;
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |message: String| SpotTraceError::Line { file: file.into(), line: line_no, message };
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if line.trim().is_empty() || cells[0] == "time_ms" {
            continue;
        }
        let [time, op, node] = cells[..] else {
            return Err(err(format!("expected `time_ms,add|remove,node`, got `{line}`")));
        };
        let t: f64 = time.parse().map_err(|_| err(format!("time_ms `{time}` is not a number")))?;
        let t = t.round() as Millis;
        let start = *t0.get_or_insert(t);
        if t < last {
            return Err(err(format!("time_ms {t} goes back in time (previous {last})")));
        }
        last = t;
        match op {
            "add" => live.insert(node.to_string()),
            "remove" => live.remove(node),
            other => return Err(err(format!("event `{other}` is neither add nor remove"))),
        };
        let cap = Some(live.len() as u32);
        match steps.last_mut() {
            Some(s) if s.0 == t - start => s.1 = cap,
            _ => steps.push((t - start, cap)),
        }
    }
    if steps.is_empty() {
        return Err(SpotTraceError::Line { file: file.into(), line: 1, message: "no events".into() });
    }
    Ok(SpotTrace { steps, period_ms: (last - t0.unwrap_or(0)).max(1) + 60_000 })
}

/// A trace bound to an offering by name, so it follows the offering into every policy's config.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferingTrace {
    pub pool: String,
    pub instance_type: String,
    pub trace: SpotTrace,
}

/// Resolves `POOL:INSTANCE_TYPE[:POLARITY]=FILE` against `cfg` and reads the file (JSON unless it ends in `.csv`,
/// a Bamboo log). A 0/1 JSON trace that does not say its own polarity takes the one named in the argument, else
/// `polarity` (so AWS and GCP files mix in one run).
pub fn resolve(cfg: &Config, arg: &str, polarity: Polarity) -> Result<OfferingTrace, SpotTraceError> {
    let bad = |message: String| SpotTraceError::Offering { arg: arg.into(), message };
    let (offering, file) = arg
        .split_once('=')
        .ok_or_else(|| bad("expected OFFERING=FILE, OFFERING being POOL:INSTANCE_TYPE[:POLARITY]".into()))?;
    let (pool, rest) =
        offering.split_once(':').ok_or_else(|| bad(format!("offering `{offering}` is not POOL:INSTANCE_TYPE")))?;
    let (it, polarity) = match rest.split_once(':') {
        Some((it, word)) => (it, word.parse().map_err(|m: String| bad(format!("polarity: {m}")))?),
        None => (rest, polarity),
    };
    check_offering(cfg, pool, it).map_err(bad)?;
    let path = Path::new(file);
    let trace = if file.ends_with(".csv") { load_bamboo(path)? } else { load_json(path, polarity)? };
    Ok(OfferingTrace { pool: pool.into(), instance_type: it.into(), trace })
}

/// Checks that `pool` is a spot pool of `cfg` that allows instance type `it`; the error says what is wrong.
pub(crate) fn check_offering(cfg: &Config, pool: &str, it: &str) -> Result<(), String> {
    let p = cfg.pools.iter().position(|x| x.name == pool).ok_or_else(|| {
        let spot: Vec<&str> =
            cfg.pools.iter().filter(|x| x.market == spillway_core::Market::Spot).map(|x| x.name.as_str()).collect();
        format!("no pool named `{pool}` (spot pools: {})", spot.join(", "))
    })?;
    if cfg.pools[p].market != spillway_core::Market::Spot {
        return Err(format!("pool `{pool}` is not a spot pool"));
    }
    if !cfg.pools[p].instance_types.iter().any(|x| x == it) {
        return Err(format!("pool `{pool}` does not allow instance type `{it}`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_availability_trace_is_unlimited_while_one_and_zero_when_zero() {
        let t =
            parse_json("a.json", r#"{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 1]}"#, Polarity::Available)
                .unwrap();
        assert_eq!(t.steps, vec![(0, None), (1_200_000, Some(0)), (1_800_000, None)]);
        assert_eq!(t.at(0), (None, 1_200_000));
        assert_eq!(t.at(1_300_000), (Some(0), 1_800_000));
        // It repeats after 4 ticks.
        assert_eq!(t.at(2_400_000 + 1_200_000).0, Some(0));
    }

    #[test]
    fn an_unavailability_trace_is_zero_while_one_whether_the_file_or_the_caller_says_so() {
        let said = r#"{"metadata": {"gap_seconds": 600, "polarity": "unavailable"}, "data": [0, 1, 1, 0]}"#;
        let unsaid = r#"{"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0]}"#;
        let want = vec![(0, None), (600_000, Some(0)), (1_800_000, None)];
        assert_eq!(parse_json("g.json", said, Polarity::Available).unwrap().steps, want);
        assert_eq!(parse_json("g.json", unsaid, Polarity::Unavailable).unwrap().steps, want);
        // The file's own word wins over the caller's default.
        let aws = r#"{"metadata": {"gap_seconds": 600, "polarity": "available"}, "data": [0, 1, 1, 0]}"#;
        assert_eq!(parse_json("a.json", aws, Polarity::Unavailable).unwrap().steps[0], (0, Some(0)));
    }

    #[test]
    fn a_shifted_trace_reads_the_original_later_and_still_repeats() {
        let t =
            parse_json("a.json", r#"{"metadata": {"gap_seconds": 10}, "data": [1, 0, 0, 1, 1]}"#, Polarity::Available)
                .unwrap();
        for off in [0, 5_000, 10_000, 25_000, 40_000, 60_000] {
            let s = t.shifted(off);
            for at in (0..120_000).step_by(2_500) {
                assert_eq!(s.at(at).0, t.at(at + off).0, "offset {off}, at {at}");
            }
        }
    }

    #[test]
    fn an_offering_may_name_its_polarity() {
        let toml = r#"
[[instance_types]]
name = "t"
gpus = 8
gpu_model = "G"
on_demand_usd_per_hour = 2.0
spot_usd_per_hour = 1.0

[[pools]]
name = "owned"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 1, gpus = 8 }]

[[pools]]
name = "spot"
market = "spot"
instance_types = ["t"]
max_nodes = 2
"#;
        let cfg = Config::parse("c.toml", toml).unwrap();
        let dir = std::env::temp_dir().join(format!("spillway-polarity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("z.json");
        std::fs::write(&file, r#"{"metadata": {"gap_seconds": 600}, "data": [1, 0]}"#).unwrap();
        let arg = |p: &str| format!("spot:t{p}={}", file.display());
        let first = |a: &str, d| resolve(&cfg, a, d).unwrap().trace.steps[0];
        assert_eq!(first(&arg(""), Polarity::Available), (0, None));
        assert_eq!(first(&arg(""), Polarity::Unavailable), (0, Some(0)));
        assert_eq!(first(&arg(":unavailable"), Polarity::Available), (0, Some(0)));
        assert_eq!(first(&arg(":available"), Polarity::Unavailable), (0, None));
        let e = resolve(&cfg, &arg(":upside-down"), Polarity::Available).unwrap_err().to_string();
        assert!(e.contains("polarity") && e.contains("upside-down"), "{e}");
        // A file that is not text names the line of its first bad byte.
        std::fs::write(&file, b"{\"metadata\": {\"gap_seconds\": 600},\n\"data\": [1, \xff0]}").unwrap();
        let e = resolve(&cfg, &arg(""), Polarity::Available).unwrap_err().to_string();
        assert!(e.contains("z.json") && e.contains("line 2") && e.contains("not UTF-8"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_preemption_trace_is_a_count() {
        let t =
            parse_json("p.json", r#"{"metadata": {"gap_seconds": 300}, "data": [4, 4, 3, 4]}"#, Polarity::Unavailable)
                .unwrap();
        assert_eq!(t.at(650_000).0, Some(3));
    }

    #[test]
    fn bad_json_names_file_and_field() {
        let cases = [
            ("not json", "(document)"),
            (r#"{"data": [1]}"#, "metadata.gap_seconds"),
            (r#"{"metadata": {"gap_seconds": -5}, "data": [1]}"#, "metadata.gap_seconds"),
            (r#"{"metadata": {"gap_seconds": 5}, "data": [1, "x"]}"#, "data[1]"),
            (r#"{"metadata": {"gap_seconds": 5}}"#, "data"),
            (r#"{"metadata": {"gap_seconds": 5, "polarity": "inverted"}, "data": [1]}"#, "metadata.polarity"),
            (r#"{"metadata": {"gap_seconds": 5, "polarity": 1}, "data": [1]}"#, "metadata.polarity"),
            (r#"{"metadata": {"gap_seconds": 5, "polarity": "available"}, "data": [0, 2]}"#, "metadata.polarity"),
            (r#"{"metadata": {"gap_seconds": 0.0001}, "data": [1]}"#, "metadata.gap_seconds"),
            (r#"{"metadata": {"gap_seconds": 1e300}, "data": [1]}"#, "metadata.gap_seconds"),
            (r#"{"metadata": {"gap_seconds": 5}, "data": [1e300]}"#, "data[0]"),
        ];
        for (text, field) in cases {
            let e = parse_json("s.json", text, Polarity::Available).unwrap_err().to_string();
            assert!(e.starts_with("s.json: field `"), "{e}");
            assert!(e.contains(&format!("`{field}`")), "{field}: {e}");
        }
    }

    #[test]
    fn bamboo_counts_live_nodes_and_names_bad_lines() {
        let t = parse_bamboo("b.csv", "time_ms,event,node\n0,add,node1\n0,add,node2\n5000,remove,node1\n").unwrap();
        assert_eq!(t.steps, vec![(0, Some(2)), (5000, Some(1))]);
        let e = parse_bamboo("b.csv", "0,add,n1\n10,drop,n1\n").unwrap_err().to_string();
        assert!(e.starts_with("b.csv:2:"), "{e}");
    }
}
