//! `spillway config show --effective`: a validated config written back as TOML with every default filled in,
//! tiers merged with their built-in defaults, so a user sees what the engine will use.

use super::{
    Alerts, Budget, ClusterSection, Config, InstanceType, Network, Policy, Pool, Prometheus, Quota, Schedule, Team,
    Tier,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// The config as written back: the file's tables, in the order of the reference.
#[derive(Serialize)]
struct Effective<'a> {
    cluster: &'a ClusterSection,
    policy: &'a Policy,
    alerts: &'a Alerts,
    #[serde(skip_serializing_if = "Option::is_none")]
    prometheus: Option<&'a Prometheus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<&'a toml::Table>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm: Option<&'a toml::Table>,
    network: &'a Network,
    tiers: BTreeMap<&'a str, &'a Tier>,
    teams: &'a [Team],
    instance_types: &'a [InstanceType],
    pools: &'a [Pool],
    schedules: &'a [Schedule],
    quotas: &'a [Quota],
    budgets: &'a [Budget],
}

impl Config {
    /// Returns the config as TOML with every default filled in, in the order of the reference. A value that TOML
    /// configs cannot hold (p2's infinite `spot_fallback_after_s`) is left out, which reads back as the same
    /// built-in default.
    pub fn effective_toml(&self) -> Result<String, String> {
        let view = Effective {
            cluster: &self.cluster,
            policy: &self.policy,
            alerts: &self.alerts,
            prometheus: self.prometheus.as_ref(),
            provider: self.provider.as_ref(),
            slurm: self.slurm.as_ref(),
            network: &self.network,
            tiers: self.tiers.iter().map(|t| (t.name.as_str(), t)).collect(),
            teams: &self.teams,
            instance_types: &self.instance_types,
            pools: &self.pools,
            schedules: &self.schedules,
            quotas: &self.quotas,
            budgets: &self.budgets,
        };
        toml::to_string(&view).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_config_fills_every_default_and_reads_back_the_same() {
        let text = "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"A100\"\non_demand_usd_per_hour = 30.0\n\
                    spot_usd_per_hour = 11.0\n[[pools]]\nname = \"spot\"\nmarket = \"spot\"\ninstance_types = [\"g8\"]\n\
                    max_nodes = 4\nspot_usd_per_hour = { g8 = 10.0 }\n[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\n\
                    max_nodes = 2\nregion = \"us-east-1\"\n[tiers.p1]\nqueue_wait_slo_s = \"5m\"\n\
                    [network]\ntransfer_gbps = 5.0\n[[network.egress]]\nfrom = \"us-east-1\"\nto = \"eu-west-1\"\n\
                    usd_per_gb = 0.05\n";
        let cfg = Config::parse("c.toml", text).unwrap();
        let shown = cfg.effective_toml().unwrap();
        for expect in [
            "idle_timeout_s = 600.0",
            "queue_wait_slo_s = 300.0",
            "[tiers.p2]",
            "scan_limit = 5000",
            "boot_latency_s = 240.0",
            "transfer_gbps = 5.0",
            "[[network.egress]]",
        ] {
            assert!(shown.contains(expect), "{expect} missing from:\n{shown}");
        }
        assert!(!shown.contains("inf"), "{shown}");
        let again = Config::parse("shown.toml", &shown).unwrap();
        assert_eq!(again, cfg, "the effective config reads back as the same config");
    }
}
