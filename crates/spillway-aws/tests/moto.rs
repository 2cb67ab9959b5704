//! The AWS provider against moto (an EC2-compatible server): the provider conformance suite, tags, idempotent
//! launches, typed errors for a bad setup. Needs `SPILLWAY_MOTO_URL` (a running `moto_server`) and
//! `SPILLWAY_MOTO_PYTHON` (the python of moto's venv, with boto3); `.ci/run` starts both. Without them the tests
//! skip with a message, except under `SPILLWAY_REQUIRE_SHARED=1` (CI), where they fail.

use spillway_aws::{AwsOptions, AwsProvider};
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
    let setup: serde_json::Value = serde_json::from_str(&helper(python, url, &["setup", name])).unwrap();
    let text = format!(
        "kind = \"aws\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\nlaunch_template = \"{name}\"\nimage_id = \"{}\"\nserver_url = \"http://127.0.0.1:1\"\ninterruption_queue_url = \"{}\"\n",
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
    assert!(prices.iter().all(|(_, price)| price.is_finite() && *price >= 0.0), "{prices:?}");
}
