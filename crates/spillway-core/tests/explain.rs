//! `explain` as a user asks it: "why is my job pending?" gets the reason that holds it back, in words, with until
//! when; "why is this pool this size?" gets what would change it. One test per reason.

mod common;

use common::{Harness, spec_of};
use spillway_core::explain::Reason;
use spillway_core::{Event, JobId, LaunchError};

/// An owned pool of two 4-GPU nodes and one cloud pool of 4-GPU nodes; `pool` and `extra` add keys.
fn config(pool: &str, extra: &str) -> String {
    format!(
        r#"
[[teams]]
name = "a"
quota_gpus = {quota}
[[teams]]
name = "b"

[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "A100"
on_demand_usd_per_hour = 10.0
spot_usd_per_hour = 3.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{{ count = 2, gpus = 4, gpu_model = "A100" }}]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
{pool}

[[pools]]
name = "spot"
market = "spot"
instance_types = ["vm4"]
max_nodes = 1

[tiers.p0]
burst_after_s = 0

{extra}
"#,
        quota = if extra.contains("QUOTA") { 4 } else { 1000 }
    )
}

fn codes(r: &[Reason]) -> Vec<&'static str> {
    r.iter().map(|x| x.code).collect()
}

fn find<'a>(r: &'a [Reason], code: &str) -> &'a Reason {
    r.iter().find(|x| x.code == code).unwrap_or_else(|| panic!("no `{code}` in {r:#?}"))
}

/// Fills the owned pool with two 4-GPU jobs of team b.
fn fill_owned(h: &mut Harness) {
    h.submit(spec_of("p0", "b", 4, 1));
    h.submit(spec_of("p0", "b", 4, 1));
    h.run_world(1.0, 5.0);
}

#[test]
fn a_job_held_by_its_team_quota_says_so() {
    let mut h = Harness::new(&config("max_nodes = 4", "# QUOTA"));
    h.submit(spec_of("p0", "a", 4, 1));
    let second = h.submit(spec_of("p0", "a", 4, 1));
    h.run_world(1.0, 5.0);
    let r = h.e.explain_job(second).unwrap();
    assert!(find(&r, "team_quota").text.contains("quota of 4"), "{r:#?}");
}

#[test]
fn a_job_within_its_tier_slo_says_when_it_may_burst() {
    let mut h = Harness::new(&config("max_nodes = 4", "[tiers.p1]\nburst_after_s = 600"));
    fill_owned(&mut h);
    h.at(10.0);
    let j = h.submit(spec_of("p1", "a", 4, 1));
    h.run_world(20.0, 5.0);
    let r = h.e.explain_job(j).unwrap();
    let slo = find(&r, "tier_slo");
    assert_eq!(slo.until, Some(610_000), "{r:#?}");
    // The owned pool is full: the gang does not fit there now.
    assert!(find(&r, "gang_does_not_fit").text.contains("room for 0"), "{r:#?}");
    assert!(!codes(&r).contains(&"waiting_for_fixed_capacity"), "one line for the tier's wait: {r:#?}");
}

#[test]
fn a_pool_at_max_says_so_and_what_a_higher_max_would_buy() {
    let mut h = Harness::new(&config("max_nodes = 1\nscale_out_cooldown_s = 0", ""));
    fill_owned(&mut h);
    h.submit(spec_of("p0", "a", 4, 1));
    let waits = h.submit(spec_of("p0", "a", 4, 2));
    h.run_world(30.0, 5.0);
    let r = h.e.explain_job(waits).unwrap();
    assert_eq!(find(&r, "at_max").pool.as_deref(), Some("od"), "{r:#?}");
    let p = h.e.explain_pool("od").unwrap();
    let cf = find(&p, "at_max_counterfactual");
    assert!(cf.text.contains("would add 2 node(s) if max were 3"), "{p:#?}");
    assert!(h.e.explain_pool("nope").is_none());
}

#[test]
fn a_pool_at_its_step_limit_and_then_in_cooldown_says_until_when() {
    let mut h = Harness::new(&config(
        "max_nodes = 10\nscale_out_cooldown_s = 300\nmin_step_nodes = 1\nmax_step_fraction = 0.01",
        "",
    ));
    fill_owned(&mut h);
    // Two nodes asked for at once: the step limit lets one go now, the other after the cooldown it starts.
    h.at(1.0);
    let j = h.submit(spec_of("p0", "a", 4, 2));
    h.timeout();
    assert_eq!(common::launches(&h.drain()).len(), 1, "one node of the two now");
    let r = h.e.explain_job(j).unwrap();
    let cut = find(&r, "step_limit");
    assert_eq!((cut.until, cut.pool.as_deref()), (Some(h.in_s(300.0)), Some("od")), "{r:#?}");
    assert!(!codes(&r).contains(&"cooldown"), "the step limit, not a cooldown, held it: {r:#?}");
    let p = h.e.explain_pool("od").unwrap();
    assert!(p.iter().any(|x| x.code == "cooldown_counterfactual" && x.until == Some(h.in_s(300.0))), "{p:#?}");
    // Later, a new job waits for the cooldown alone: no launch was cut short in its pass.
    h.at(100.0);
    let k = h.submit(spec_of("p0", "a", 4, 1));
    h.timeout();
    h.drain();
    let r = h.e.explain_job(k).unwrap();
    let cool = find(&r, "cooldown");
    assert_eq!(cool.until, Some(h.in_s(201.0)), "{r:#?}");
    assert!(!codes(&r).contains(&"step_limit"), "{r:#?}");
}

#[test]
fn a_backed_off_offering_says_when_it_returns() {
    let mut h = Harness::new(&config("max_nodes = 4\nscale_out_cooldown_s = 0", ""));
    fill_owned(&mut h);
    let j = h.submit(spec_of("p0", "a", 4, 1));
    h.timeout();
    let acts = h.drain();
    let node = common::launches(&acts)[0].0;
    h.at(2.0);
    h.event(Event::LaunchFailed { node, error: LaunchError::InsufficientCapacity });
    h.drain();
    let r = h.e.explain_job(j).unwrap();
    let b = find(&r, "backed_off");
    assert!(b.until.is_some_and(|t| t > 2_000), "{r:#?}");
}

#[test]
fn a_job_of_a_capped_team_says_its_budget_holds_it() {
    let budget = "[[budgets]]\nteam = \"a\"\nperiod = \"day\"\nusd = 0.001\nhard_cap = true";
    let mut h = Harness::new(&config("max_nodes = 4\nscale_out_cooldown_s = 0", budget));
    // Team a spends its budget on the owned pool, then wants more.
    h.submit(spec_of("p0", "a", 4, 1));
    h.run_world(10.0, 5.0);
    h.submit(spec_of("p0", "b", 4, 1));
    h.run_world(11.0, 5.0);
    let j = h.submit(spec_of("p0", "a", 4, 1));
    h.timeout();
    h.drain();
    let r = h.e.explain_job(j).unwrap();
    assert!(codes(&r).contains(&"budget_cap"), "{r:#?}");
    assert!(find(&r, "budget_cap").text.contains("team a"), "{r:#?}");
    // No cloud pool is said to be free to grow for it: the cap is what holds it.
    assert!(!codes(&r).contains(&"may_grow"), "{r:#?}");
    assert!(r.iter().any(|x| x.code == "budget_cap" && x.pool.as_deref() == Some("od")), "{r:#?}");
    // Waits run to the clock asked about, not the last decision.
    let later = h.e.explain_job_at(j, h.in_s(100.0)).unwrap();
    assert!(r[0].text.contains("(waiting 0s)") && later[0].text.contains("(waiting 1m40s)"), "{r:#?}\n{later:#?}");
    let running = h.e.explain_job(JobId(0)).unwrap();
    assert_eq!(codes(&running), ["running"], "{running:#?}");
}
