//! Config parsing: every bad input gives a `ConfigError` whose Display names the file, the line and the key, and
//! the example configs parse.

use spillway_core::{Config, Market};

/// A valid config: an instance type, a fixed pool and an on-demand pool (pools[1]).
const BASE: &str = r#"[cluster]
name = "t"

[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 2, gpus = 8 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 4
"#;

/// A schedule on the on-demand pool, appended to [`BASE`] by the cases that need one.
const SCHEDULE: &str = r#"
[[schedules]]
pool = "od"
cron = "0 9 * * 1-5"
timezone = "Europe/Berlin"
duration_s = 3600
min_nodes = 1
"#;

/// Returns the 1-based line of the `nth` (0-based) line of `text` containing `needle`.
fn line_with(text: &str, needle: &str, nth: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .nth(nth)
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("`{needle}` (#{nth}) not in the test text"))
}

/// A bad config case: the rule it breaks, the text, the key the error must name, the text on the line the error
/// must name (and which occurrence), and a piece of the message.
struct Case {
    rule: &'static str,
    text: String,
    key: &'static str,
    line_of: (&'static str, usize),
    piece: &'static str,
}

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            rule: "min_nodes greater than max_nodes",
            text: replace("max_nodes = 4", "min_nodes = 5\nmax_nodes = 4"),
            key: "pools[1].min_nodes",
            line_of: ("min_nodes = 5", 0),
            piece: "min_nodes 5 > max_nodes 4",
        },
        Case {
            rule: "an unknown instance type in a pool",
            text: replace("instance_types = [\"g8\"]", "instance_types = [\"g8\", \"p5.48xlarge\"]"),
            key: "pools[1].instance_types",
            line_of: ("instance_types = [\"g8\", \"p5.48xlarge\"]", 0),
            piece: "unknown instance type `p5.48xlarge`",
        },
        Case {
            rule: "an unknown tier field",
            text: format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = 300\nqueue_wait = 60\n"),
            key: "tiers.p1.queue_wait",
            line_of: ("queue_wait = 60", 0),
            piece: "unknown key here; did you mean `queue_wait_slo_s`?",
        },
        Case {
            rule: "an unknown top-level table",
            text: format!("{BASE}\n[polcy]\npreemption = false\n"),
            key: "polcy",
            line_of: ("[polcy]", 0),
            piece: "unknown top-level table; did you mean `policy`?",
        },
        Case {
            rule: "an unknown key in a pool",
            text: replace("max_nodes = 4", "max_nodes = 4\nmax_node = 3"),
            key: "pools[1].max_node",
            line_of: ("max_node = 3", 0),
            piece: "did you mean `max_nodes`?",
        },
        Case {
            rule: "a value of the wrong type",
            text: replace("max_nodes = 4", "max_nodes = \"four\""),
            key: "pools[1].max_nodes",
            line_of: ("max_nodes = \"four\"", 0),
            piece: "expected integer >= 0, got a string",
        },
        Case {
            rule: "a cron expression that does not parse",
            text: format!("{BASE}{}", SCHEDULE.replace("0 9 * * 1-5", "0 25 * * mon-fri-sat")),
            key: "schedules[0].cron",
            line_of: ("cron = ", 0),
            piece: "does not parse",
        },
        Case {
            rule: "an unknown time zone",
            text: format!("{BASE}{}", SCHEDULE.replace("Europe/Berlin", "Mars/Olympus_Mons")),
            key: "schedules[0].timezone",
            line_of: ("timezone = ", 0),
            piece: "`Mars/Olympus_Mons` is not an IANA time zone",
        },
        Case {
            rule: "a schedule on an unknown pool",
            text: format!("{BASE}{}", SCHEDULE.replace("pool = \"od\"", "pool = \"gone\"")),
            key: "schedules[0].pool",
            line_of: ("pool = \"gone\"", 0),
            piece: "unknown pool `gone`",
        },
        Case {
            rule: "a schedule min above the pool's max",
            text: format!("{BASE}{}", SCHEDULE.replace("min_nodes = 1", "min_nodes = 9")),
            key: "schedules[0].min_nodes",
            line_of: ("min_nodes = 9", 0),
            piece: "max_nodes 4",
        },
        Case {
            rule: "a fixed pool with an empty node list",
            text: replace("nodes = [{ count = 2, gpus = 8 }]", "nodes = []"),
            key: "pools[0].nodes",
            line_of: ("nodes = []", 0),
            piece: "lists no nodes",
        },
        Case {
            rule: "a fixed pool of more nodes than a run's memory holds",
            text: replace("nodes = [{ count = 2, gpus = 8 }]", "nodes = [{ count = 4000000000, gpus = 8 }]"),
            key: "pools[0].nodes",
            line_of: ("nodes = [{ count = 4000000000", 0),
            piece: "4000000000 nodes is more than a pool may have (100000)",
        },
        Case {
            rule: "a fixed pool with no nodes key names the pool's header",
            text: replace("nodes = [{ count = 2, gpus = 8 }]\n", ""),
            key: "pools[0].nodes",
            line_of: ("[[pools]]", 0),
            piece: "lists no nodes",
        },
        Case {
            rule: "duplicate pool names",
            text: replace("name = \"od\"", "name = \"onprem\""),
            key: "pools[1].name",
            line_of: ("name = \"onprem\"", 1),
            piece: "defined twice",
        },
        Case {
            rule: "a TOML syntax error",
            text: replace("max_nodes = 4", "max_nodes = = 4"),
            key: "pools[1].max_nodes",
            line_of: ("max_nodes = = 4", 0),
            piece: "",
        },
        Case {
            rule: "an unterminated string",
            text: replace("name = \"od\"", "name = \"od"),
            key: "pools[1].name",
            line_of: ("name = \"od", 0),
            piece: "",
        },
        Case {
            rule: "a missing key is named under the table entry it is missing from",
            text: replace("nodes = [{ count = 2, gpus = 8 }]", "nodes = [{ count = 2 }]"),
            key: "pools[0].nodes.gpus",
            line_of: ("nodes = [{ count = 2 }]", 0),
            piece: "missing field `gpus`",
        },
        Case {
            rule: "an instance type with no GPUs",
            text: replace("gpus = 8\n", "gpus = 0\n"),
            key: "instance_types[0].gpus",
            line_of: ("gpus = 0", 0),
            piece: "at least 1",
        },
        Case {
            rule: "a cloud pool with max_nodes 0",
            text: replace("max_nodes = 4", "max_nodes = 0"),
            key: "pools[1].max_nodes",
            line_of: ("max_nodes = 0", 0),
            piece: "max_nodes >= 1",
        },
        Case {
            rule: "a negative idle timeout",
            text: replace("max_nodes = 4", "max_nodes = 4\nidle_timeout_s = -5"),
            key: "pools[1].idle_timeout_s",
            line_of: ("idle_timeout_s = -5", 0),
            piece: "-5",
        },
        Case {
            rule: "a launch failure rate above 1",
            text: replace("max_nodes = 4", "max_nodes = 4\nlaunch_failure_rate = 1.5"),
            key: "pools[1].launch_failure_rate",
            line_of: ("launch_failure_rate = 1.5", 0),
            piece: "probability",
        },
        Case {
            rule: "a capacity for a type the pool does not allow",
            text: replace("max_nodes = 4", "max_nodes = 4\ncapacity = { \"x9\" = 3 }"),
            key: "pools[1].capacity",
            line_of: ("capacity = ", 0),
            piece: "`x9`",
        },
        Case {
            rule: "a team defined twice",
            text: format!("{BASE}\n[[teams]]\nname = \"ml\"\n\n[[teams]]\nname = \"ml\"\n"),
            key: "teams[1].name",
            line_of: ("name = \"ml\"", 1),
            piece: "defined twice",
        },
        Case {
            rule: "a team weight of zero",
            text: format!("{BASE}\n[[teams]]\nname = \"ml\"\nweight = 0\n"),
            key: "teams[0].weight",
            line_of: ("weight = 0", 0),
            piece: "> 0",
        },
        Case {
            rule: "a new tier without a priority",
            text: format!("{BASE}\n[tiers.p3]\nqueue_wait_slo_s = 60\n"),
            key: "tiers.p3",
            line_of: ("[tiers.p3]", 0),
            piece: "needs a `priority`",
        },
        Case {
            rule: "two tiers with one priority",
            text: format!("{BASE}\n[tiers.p3]\npriority = 1\n"),
            key: "tiers.p3.priority",
            line_of: ("priority = 1", 0),
            piece: "also tier `p1`",
        },
        Case {
            rule: "a negative tier SLO",
            text: format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = -1\n"),
            key: "tiers.p1.queue_wait_slo_s",
            line_of: ("queue_wait_slo_s = -1", 0),
            piece: ">= 0",
        },
        Case {
            rule: "a cluster start that is not RFC 3339",
            text: replace("name = \"t\"", "name = \"t\"\nstart = \"monday\""),
            key: "cluster.start",
            line_of: ("start = \"monday\"", 0),
            piece: "RFC 3339",
        },
        Case {
            rule: "a NaN pool value",
            text: replace("max_nodes = 4", "max_nodes = 4\nidle_timeout_s = nan"),
            key: "pools[1].idle_timeout_s",
            line_of: ("idle_timeout_s = nan", 0),
            piece: "nan is not a number",
        },
        Case {
            rule: "an infinite tier value (NaN and infinity pass `x >= 0`-style checks or defeat them)",
            text: format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = 60\nburst_after_s = inf\n"),
            key: "tiers.p1.burst_after_s",
            line_of: ("burst_after_s = inf", 0),
            piece: "inf is not a finite number",
        },
        Case {
            rule: "a duration past 100 years (it overflowed into a timer that fired at once)",
            text: format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = 60\nburst_after_s = 1.5e300\n"),
            key: "tiers.p1.burst_after_s",
            line_of: ("burst_after_s = 1.5e300", 0),
            piece: "longer than 100 years",
        },
        Case {
            rule: "a duration string past 100 years",
            text: format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = 60\nburst_after_s = \"999999999999d\"\n"),
            key: "tiers.p1.burst_after_s",
            line_of: ("burst_after_s = \"999999999999d\"", 0),
            piece: "longer than 100 years",
        },
        Case {
            rule: "an infinite spot fallback (written; only p2's built-in default is infinite)",
            text: format!("{BASE}\n[tiers.p2]\nspot_fallback_after_s = +inf\n"),
            key: "tiers.p2.spot_fallback_after_s",
            line_of: ("spot_fallback_after_s = +inf", 0),
            piece: "+inf is not a finite number",
        },
        Case {
            rule: "a negative infinite policy value",
            text: format!("{BASE}\n[policy]\ndeadline_margin_s = -inf\n"),
            key: "policy.deadline_margin_s",
            line_of: ("deadline_margin_s = -inf", 0),
            piece: "-inf is not a finite number",
        },
        Case {
            rule: "a NaN in an inline table of an array",
            text: replace(
                "max_nodes = 4",
                "max_nodes = 4\nstep_scaling = [{ above = 0.8, adjust_nodes = 1 }, { below = nan, adjust_nodes = -1 }]",
            ),
            key: "pools[1].step_scaling[1].below",
            line_of: ("step_scaling = ", 0),
            piece: "nan is not a number",
        },
        Case {
            rule: "a NaN price of an instance type",
            text: replace("spot_usd_per_hour = 5.0", "spot_usd_per_hour = nan"),
            key: "instance_types[0].spot_usd_per_hour",
            line_of: ("spot_usd_per_hour = nan", 0),
            piece: "nan is not a number",
        },
        Case {
            rule: "the first of two non-finite values in the text is the one named",
            text: replace("gpu_usd_per_hour = 1.0", "gpu_usd_per_hour = -nan").replacen(
                "max_nodes = 4",
                "max_nodes = 4\nboot_jitter = inf",
                1,
            ),
            key: "pools[0].gpu_usd_per_hour",
            line_of: ("gpu_usd_per_hour = -nan", 0),
            piece: "-nan is not a number",
        },
        Case {
            rule: "a price of an instance type past any real one (its costs would overflow to inf)",
            text: replace("spot_usd_per_hour = 5.0", "spot_usd_per_hour = 1e308"),
            key: "instance_types[0].spot_usd_per_hour",
            line_of: ("spot_usd_per_hour = 1e308", 0),
            piece: "from 0 to 1000000",
        },
        Case {
            rule: "an owned GPU's price past any real one",
            text: replace("gpu_usd_per_hour = 1.0", "gpu_usd_per_hour = 1e300"),
            key: "pools[0].gpu_usd_per_hour",
            line_of: ("gpu_usd_per_hour = 1e300", 0),
            piece: "from 0 to 1000000",
        },
        Case {
            rule: "a negative utilization warm-up",
            text: replace("max_nodes = 4", "max_nodes = 4\nutilization_warmup_s = -1.0"),
            key: "pools[1].utilization_warmup_s",
            line_of: ("utilization_warmup_s = -1.0", 0),
            piece: "-1",
        },
        Case {
            rule: "a negative number in a fixed pool",
            text: replace("gpu_usd_per_hour = 1.0", "gpu_usd_per_hour = 1.0\nidle_timeout_s = -3.0"),
            key: "pools[0].idle_timeout_s",
            line_of: ("idle_timeout_s = -3.0", 0),
            piece: "-3",
        },
        Case {
            rule: "a step band threshold that is no utilization",
            text: replace("max_nodes = 4", "max_nodes = 4\nstep_scaling = [{ above = 1.5, adjust_nodes = 1 }]"),
            key: "pools[1].step_scaling",
            line_of: ("step_scaling = ", 0),
            piece: "in [0, 1], got 1.5",
        },
        Case {
            rule: "a scan limit of zero",
            text: format!("{BASE}\n[policy]\nscan_limit = 0\n"),
            key: "policy.scan_limit",
            line_of: ("scan_limit = 0", 0),
            piece: "at least 1",
        },
        Case {
            rule: "a reserve of deadline trips no job could ever leave",
            text: format!("{BASE}\n[policy]\ndeadline_reserve_trips = 4000000000\n"),
            key: "policy.deadline_reserve_trips",
            line_of: ("deadline_reserve_trips = 4000000000", 0),
            piece: "at most 1000",
        },
    ]
}

#[test]
fn the_base_config_used_by_the_cases_is_valid() {
    let cfg = Config::parse("c.toml", BASE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.pools.len(), 2);
    let with_schedule = format!("{BASE}{SCHEDULE}");
    let cfg = Config::parse("c.toml", &with_schedule).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.schedules.len(), 1);
}

#[test]
fn bad_config_names_the_key_and_the_line() {
    let mut failures = Vec::new();
    for c in cases() {
        let line = line_with(&c.text, c.line_of.0, c.line_of.1);
        let (want, key) = (format!("c.toml:{line}:"), format!(": {}: ", c.key));
        match Config::parse("c.toml", &c.text) {
            Ok(_) => failures.push(format!("{}: accepted", c.rule)),
            Err(e) => {
                let shown = e.to_string();
                // The key check adds the column (`c.toml:12:5: ...`).
                let at =
                    shown.strip_prefix(&want).map(|r| r.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':'));
                if at.is_none() || !shown.contains(&key) || !shown.contains(c.piece) {
                    failures.push(format!("{}:\n    got  {shown}\n    want {want}...{}...", c.rule, c.piece));
                }
                if e.line != Some(line) || e.key != c.key || e.file != "c.toml" {
                    failures.push(format!("{}: fields {:?}", c.rule, e));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn tier_sections_change_only_the_fields_they_name() {
    let cfg = Config::parse("c.toml", &format!("{BASE}\n[tiers.p1]\nqueue_wait_slo_s = 300\n")).unwrap();
    let defaults = spillway_core::config::default_tiers();
    let p1 = &cfg.tiers[cfg.tier_index("p1").unwrap()];
    assert_eq!(p1.queue_wait_slo_s, 300.0);
    assert_eq!(p1.markets, defaults[1].markets);
    assert_eq!(p1.burst_after_s, defaults[1].burst_after_s);
    assert_eq!(cfg.tiers.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["p0", "p1", "p2"]);
}

fn example(name: &str) -> (String, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    (path.display().to_string(), text)
}

#[test]
fn the_hybrid_example_parses() {
    let (file, text) = example("hybrid.toml");
    let cfg = Config::parse(&file, &text).unwrap_or_else(|e| panic!("{e}"));
    let markets: Vec<Market> = cfg.pools.iter().map(|p| p.market).collect();
    assert_eq!(markets, [Market::Fixed, Market::OnDemand, Market::Spot]);
    assert_eq!(cfg.schedules.len(), 1);
    assert_eq!(cfg.teams.len(), 3);
    let fixed_gpus: u32 = cfg.pools[0].nodes.iter().map(|n| n.count * n.gpus).sum();
    assert_eq!(fixed_gpus, 32);
}

#[test]
fn the_alibaba_example_parses() {
    let (file, text) = example("alibaba-16gpu.toml");
    let cfg = Config::parse(&file, &text).unwrap_or_else(|e| panic!("{e}"));
    let fixed_gpus: u32 = cfg.pools.iter().flat_map(|p| &p.nodes).map(|n| n.count * n.gpus).sum();
    assert_eq!(fixed_gpus, 16);
    assert!(cfg.pools.iter().any(|p| p.market == Market::Spot));
    assert!(cfg.pools.iter().any(|p| p.market == Market::OnDemand));
}
