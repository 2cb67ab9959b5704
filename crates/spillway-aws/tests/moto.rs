//! The AWS provider against moto (an EC2-compatible server): the provider conformance suite, tags, idempotent
//! launches, typed errors for a bad setup. Needs `SPILLWAY_MOTO_URL` (a running `moto_server`) and
//! `SPILLWAY_MOTO_PYTHON` (the python of moto's venv, with boto3); `.ci/run` starts both. Without them the tests
//! skip with a message, except under `SPILLWAY_REQUIRE_SHARED=1` (CI), where they fail.

use spillway_aws::{AwsOptions, AwsProvider, PoolPlace};
use spillway_providers::{LaunchSpec, Provider, run_conformance};
use std::process::Command;

/// Returns (moto URL, python) or `None` (skip) when moto is not set up here.
fn moto() -> Option<(String, String)> {
    match (std::env::var("SPILLWAY_MOTO_URL"), std::env::var("SPILLWAY_MOTO_PYTHON")) {
        (Ok(u), Ok(p)) => Some((u, p)),
        _ if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") => {
            panic!("SPILLWAY_MOTO_URL and SPILLWAY_MOTO_PYTHON must be set in CI (.ci/run starts moto)")
        }
        _ => {
            println!("skipping: SPILLWAY_MOTO_URL / SPILLWAY_MOTO_PYTHON not set (no moto server; .ci/run starts one)");
            None
        }
    }
}

const HELPER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../spillway/tests/aws/moto_helper.py");

/// Runs the moto helper; returns its stdout.
fn helper(python: &str, url: &str, args: &[&str]) -> String {
    let out = Command::new(python).arg(HELPER).arg(url).args(args).output().expect("running the moto helper");
    assert!(out.status.success(), "moto helper {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn set_credentials() {
    // SAFETY: set before any thread of this test reads the environment; every test sets the same values.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    }
}

/// Options for a fresh launch template `name` on moto.
fn options(python: &str, url: &str, name: &str) -> AwsOptions {
    options_with(python, url, name, "")
}

/// Options for a fresh launch template `name` on moto, with `extra` lines in the `[provider]` table.
fn options_with(python: &str, url: &str, name: &str, extra: &str) -> AwsOptions {
    let setup: serde_json::Value = serde_json::from_str(&helper(python, url, &["setup", name])).unwrap();
    let text = format!(
        "kind = \"aws\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\nlaunch_template = \"{name}\"\nimage_id = \"{}\"\nserver_url = \"http://127.0.0.1:1\"\ninterruption_queue_url = \"{}\"\n{extra}",
        setup["image_id"].as_str().unwrap(),
        setup["queue_url"].as_str().unwrap()
    );
    AwsOptions::from_config("test.toml", &format!("[provider]\n{text}")).unwrap()
}

fn spec(cluster: &str, node: u32) -> LaunchSpec {
    LaunchSpec {
        cluster: cluster.into(),
        node,
        pool: "spot".into(),
        instance_type: "p3.2xlarge".into(),
        gpus: 1,
        spot: true,
        token: format!("token-{node}"),
        boot_delay_s: 0.0,
        slurm_node: None,
        zone: None,
    }
}

fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

#[test]
fn the_aws_provider_passes_the_conformance_suite_on_moto() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("conf");
    let p = AwsProvider::new(options(&python, &url, &name)).expect("the provider starts against moto");
    assert_eq!(p.name(), "aws");
    run_conformance(&p, &name, |node| spec(&name, node));
}

#[test]
fn instances_carry_the_cluster_pool_and_node_tags_and_boot_the_agent_with_the_token_on_stdin() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("tags");
    let p = AwsProvider::new(options(&python, &url, &name)).unwrap();
    let i = p.launch(&spec(&name, 4)).unwrap();
    assert!(i.spot, "a spot launch is a spot instance: {i:?}");
    let listed: serde_json::Value = serde_json::from_str(&helper(&python, &url, &["instances", &name])).unwrap();
    let inst = listed.as_array().unwrap().iter().find(|x| x["id"] == i.id.as_str()).expect("the instance is listed");
    assert_eq!(inst["tags"]["spillway:cluster"], name.as_str());
    assert_eq!(inst["tags"]["spillway:pool"], "spot");
    assert_eq!(inst["tags"]["spillway:node"], "4");
    assert_eq!(inst["lifecycle"], "spot");
    let ud = inst["user_data"].as_str().unwrap();
    assert!(
        ud.contains(
            "printf '%s\\n' 'token-4' | exec '/usr/local/bin/spillway' agent --server 'http://127.0.0.1:1' --node 4"
        ),
        "{ud}"
    );
    p.terminate(&i.id).unwrap();
    assert!(p.list(&name).unwrap().is_empty());
}

#[test]
fn a_missing_launch_template_or_region_is_a_clear_error_at_startup() {
    let Some((url, _)) = moto() else { return };
    set_credentials();
    let text = format!(
        "kind = \"aws\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\nlaunch_template = \"no-such-template\"\nserver_url = \"http://x\"\n"
    );
    let opts = AwsOptions::from_config("t.toml", &format!("[provider]\n{text}")).unwrap();
    let e = AwsProvider::new(opts).err().expect("refused");
    assert!(e.contains("no-such-template") && e.contains("does not exist"), "{e}");
}

#[test]
fn an_interruption_warning_put_on_eventbridge_comes_back_once_as_a_notice() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("sqs");
    let p = AwsProvider::new(options(&python, &url, &name)).unwrap();
    helper(&python, &url, &["event", "interruption", "i-0123456789abcdef0"]);
    helper(&python, &url, &["event", "rebalance", "i-0123456789abcdef1"]);
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(p.notices().unwrap());
        if got.len() >= 2 {
            break;
        }
    }
    let ids: Vec<&str> = got.iter().map(|n| n.instance_id.as_str()).collect();
    assert_eq!(ids, vec!["i-0123456789abcdef0", "i-0123456789abcdef1"], "{got:?}");
    assert!(matches!(got[0].kind, spillway_providers::NoticeKind::Interruption { deadline_ms: Some(_) }));
    assert_eq!(got[1].kind, spillway_providers::NoticeKind::Rebalance);
    // Deleted once read: a second poll is empty.
    assert!(p.notices().unwrap().is_empty());
}

#[test]
fn spot_prices_are_read_from_the_price_history_and_only_valid_ones_come_back() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("price");
    let p = AwsProvider::new(options(&python, &url, &name)).unwrap();
    // moto answers a fixed fake history (and none since now): whatever comes back is a valid price, and an empty
    // answer leaves the config's prices standing.
    let prices = p.spot_prices(&["p3.2xlarge".into(), "g5.xlarge".into()]).expect("DescribeSpotPriceHistory works");
    assert!(prices.iter().all(|q| q.usd_per_hour.is_finite() && q.usd_per_hour > 0.0), "{prices:?}");
    assert!(prices.iter().all(|q| q.zone.as_deref().is_some_and(|z| z.starts_with("us-east-1"))), "{prices:?}");
}

#[test]
fn a_pool_with_a_zone_launches_there_and_is_priced_by_the_zones_it_may_launch_in() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("zones");
    let subnets: serde_json::Value = serde_json::from_str(&helper(&python, &url, &["subnets"])).unwrap();
    let subnets: Vec<(String, String)> = subnets
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["zone"].as_str().unwrap().to_string()))
        .collect();
    assert!(subnets.len() >= 3, "moto's default VPC has a subnet per zone: {subnets:?}");
    let ((sa, za), (sb, zb), (_, zc)) = (&subnets[0], &subnets[1], &subnets[2]);
    let p = AwsProvider::new(options_with(&python, &url, &name, &format!("subnets = [\"{sa}\", \"{sb}\"]\n")))
        .expect("the provider starts with two subnets");
    let place = |zone: &str, region: &str| PoolPlace {
        name: format!("spot-{zone}"),
        region: Some(region.into()),
        zone: Some(zone.into()),
    };
    p.check_pools(&[place(za, "us-east-1"), place(zb, "us-east-1")]).expect("both zones have a subnet");
    let e = p.check_pools(&[place(zc, "us-east-1")]).unwrap_err();
    assert!(e.contains(zc.as_str()) && e.contains(sa.as_str()), "a zone without a subnet is refused: {e}");
    let e = p.check_pools(&[place("us-west-2a", "us-west-2")]).unwrap_err();
    assert!(e.contains("us-west-2") && e.contains("one region"), "another region is refused: {e}");
    let e = p.check_pools(&[place("us-east-1q", "us-east-1")]).unwrap_err();
    assert!(e.contains("us-east-1q") && e.contains("not a zone"), "{e}");
    for (node, zone) in [(1, zb), (2, za)] {
        let i = p.launch(&LaunchSpec { zone: Some(zone.clone()), ..spec(&name, node) }).unwrap();
        let listed: serde_json::Value = serde_json::from_str(&helper(&python, &url, &["instances", &name])).unwrap();
        let inst = listed.as_array().unwrap().iter().find(|x| x["id"] == i.id.as_str()).expect("listed");
        assert_eq!(inst["zone"], zone.as_str(), "node {node} launched in its pool's zone: {inst}");
        p.terminate(&i.id).unwrap();
    }
    // moto quotes a price in every zone for the types it has offerings of (m5.large, not GPU types).
    let quotes = p.spot_prices(&["m5.large".into()]).unwrap();
    let mut zones: Vec<&str> = quotes.iter().filter_map(|q| q.zone.as_deref()).collect();
    zones.sort_unstable();
    assert_eq!(zones, vec![za.as_str(), zb.as_str()], "one price per zone of the subnets: {quotes:?}");
}

#[test]
fn a_subnet_that_does_not_exist_is_an_error_at_startup_naming_it() {
    let Some((url, python)) = moto() else { return };
    set_credentials();
    let name = unique("badsubnet");
    let e = AwsProvider::new(options_with(&python, &url, &name, "subnets = [\"subnet-00000000deadbeef\"]\n"))
        .err()
        .expect("refused");
    assert!(e.contains("subnet-00000000deadbeef"), "{e}");
}
