//! The `[slurm]` config table: which Slurm nodes Spillway buys, from which pools, and which tier and team each
//! partition's jobs are. Checked against the engine's config when the daemon starts, each error naming its key.

use super::hostlist;
use serde::Deserialize;
use spillway_core::Config;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `[slurm]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmOptions {
    /// Directory holding `scontrol` and `squeue` (absent: found on `PATH`).
    #[serde(default)]
    pub bin_dir: Option<PathBuf>,
    /// The cluster's `slurm.conf` (`SLURM_CONF` for the clients, and for the `slurmd` a local node starts).
    #[serde(default)]
    pub conf: Option<PathBuf>,
    /// The `slurmd` a node of the local provider runs (a cloud image starts its own).
    #[serde(default = "default_slurmd")]
    pub slurmd: PathBuf,
    /// The team billed for a node whose job's partition names none (a `[[teams]]` of the config).
    #[serde(default = "default_team")]
    pub team: String,
    /// Seconds between syncs with Slurm's view of its nodes.
    #[serde(default = "default_sync_s")]
    pub sync_every_s: f64,
    /// The cloud nodes Spillway buys for Slurm.
    pub nodes: Vec<NodeSet>,
    /// Partitions whose jobs are of a tier (and team); a job in another partition is of its node set's tier.
    #[serde(default)]
    pub partitions: Vec<PartitionMap>,
    /// Every node name with its node set, expanded once when the table is read.
    #[serde(skip)]
    names: BTreeMap<String, NodeInfo>,
}

/// Cloud nodes of one shape: their names as in `slurm.conf`, the pools they may come from, what they hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSet {
    /// A hostlist: `c[1-16]`.
    pub names: String,
    /// Pools with `scheduler = "slurm"` (a spot and an on-demand one, say); each tier uses those of its markets.
    pub pools: Vec<String>,
    /// GPUs the node has in `slurm.conf` (`Gres=gpu:8`): only instance types with at least these are bought.
    pub gpus: u32,
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// The tier of a node no job of a mapped partition asked for (absent: the highest tier, which is the most
    /// careful with spot).
    #[serde(default)]
    pub tier: Option<String>,
}

/// A partition's jobs: their tier, and the team billed (absent: the job's account if it is a team, else `team`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionMap {
    pub name: String,
    pub tier: String,
    #[serde(default)]
    pub team: Option<String>,
}

/// One resolved node: the set it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub set: usize,
}

fn default_slurmd() -> PathBuf {
    PathBuf::from("slurmd")
}
fn default_team() -> String {
    "slurm".into()
}
fn default_sync_s() -> f64 {
    10.0
}

/// The config file as far as the Slurm table goes (everything else is the engine's).
#[derive(Deserialize)]
struct Whole {
    #[serde(default)]
    slurm: Option<SlurmOptions>,
}

impl SlurmOptions {
    /// Reads the `[slurm]` table of the config `text` (`file` names it in errors) and checks it against `cfg`.
    /// Returns `None` when there is no table; an error names the key, and the line for a type error.
    pub fn from_config(file: &str, text: &str, cfg: &Config) -> Result<Option<SlurmOptions>, String> {
        let whole: Whole = toml::from_str(text).map_err(|e| format!("{file}: [slurm]: {e}"))?;
        let Some(opts) = whole.slurm else {
            if let Some(p) = cfg.pools.iter().find(|p| p.external()) {
                return Err(format!(
                    "{file}: pool `{}` has scheduler = \"slurm\" but there is no [slurm] table",
                    p.name
                ));
            }
            return Ok(None);
        };
        let mut opts = opts;
        opts.names = opts.check(cfg).map_err(|e| format!("{file}: slurm.{e}"))?;
        Ok(Some(opts))
    }

    /// Checks names, pools, tiers and GPUs against the engine's config; returns every name with its node set.
    fn check(&self, cfg: &Config) -> Result<BTreeMap<String, NodeInfo>, String> {
        if !(self.sync_every_s >= 1.0 && self.sync_every_s <= 3600.0) {
            return Err(format!("sync_every_s: {} is not 1 to 3600 seconds", self.sync_every_s));
        }
        if self.nodes.is_empty() {
            return Err("nodes: no node sets (add [[slurm.nodes]] with names, pools and gpus)".into());
        }
        // A team the config does not have would be billed beside the real ones, outside their quotas.
        let team = |t: &str| cfg.teams.iter().any(|x| x.name == t);
        if !team(&self.team) {
            return Err(format!("team: `{}` is not a [[teams]] of this config", self.team));
        }
        if let Some(p) = &self.conf
            && !p.is_file()
        {
            return Err(format!("conf: {} does not exist or is not a file", p.display()));
        }
        if let Some(p) = &self.bin_dir
            && !p.is_dir()
        {
            return Err(format!("bin_dir: {} does not exist or is not a directory", p.display()));
        }
        let mut seen = BTreeMap::new();
        for (i, set) in self.nodes.iter().enumerate() {
            let key = |k: &str| format!("nodes[{i}].{k}");
            let names = hostlist::expand(&set.names).map_err(|e| format!("{}: {e}", key("names")))?;
            for n in names {
                if let Some(j) = seen.insert(n.clone(), NodeInfo { set: i }) {
                    return Err(format!("{}: node {n} is in node set {} too", key("names"), j.set));
                }
            }
            if set.gpus == 0 {
                return Err(format!("{}: must be at least 1", key("gpus")));
            }
            if set.pools.is_empty() {
                return Err(format!("{}: lists no pools", key("pools")));
            }
            for name in &set.pools {
                let Some(pool) = cfg.pools.iter().find(|p| p.name == *name) else {
                    return Err(format!("{}: unknown pool `{name}`", key("pools")));
                };
                if !pool.external() {
                    return Err(format!("{}: pool `{name}` needs scheduler = \"slurm\"", key("pools")));
                }
            }
            let holds = set.pools.iter().filter_map(|n| cfg.pools.iter().find(|p| p.name == *n)).any(|p| {
                p.instance_types.iter().filter_map(|t| cfg.instance_types.iter().find(|x| x.name == *t)).any(|t| {
                    t.gpus >= set.gpus && set.gpu_model.as_ref().is_none_or(|m| t.gpu_model.eq_ignore_ascii_case(m))
                })
            });
            if !holds {
                return Err(format!(
                    "{}: no instance type of its pools has {} GPUs{}",
                    key("gpus"),
                    set.gpus,
                    set.gpu_model.as_ref().map_or(String::new(), |m| format!(" of model {m}"))
                ));
            }
            if let Some(t) = &set.tier
                && cfg.tier_index(t).is_none()
            {
                return Err(format!("{}: unknown tier `{t}`", key("tier")));
            }
        }
        for (i, p) in self.partitions.iter().enumerate() {
            if self.partitions[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("partitions[{i}].name: partition `{}` is mapped twice", p.name));
            }
            if cfg.tier_index(&p.tier).is_none() {
                return Err(format!("partitions[{i}].tier: unknown tier `{}`", p.tier));
            }
            if let Some(t) = &p.team
                && !team(t)
            {
                return Err(format!("partitions[{i}].team: `{t}` is not a [[teams]] of this config"));
            }
        }
        Ok(seen)
    }

    /// Returns every node name Spillway buys for Slurm, with its node set.
    pub fn node_names(&self) -> &BTreeMap<String, NodeInfo> {
        &self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[instance_types]]
name = "h100x8"
gpus = 8
gpu_model = "h100"
on_demand_usd_per_hour = 98.0
spot_usd_per_hour = 40.0

[[pools]]
name = "cloud-spot"
market = "spot"
instance_types = ["h100x8"]
max_nodes = 4
scheduler = "slurm"

[[teams]]
name = "slurm"

[[teams]]
name = "ml"

[[pools]]
name = "cloud-od"
market = "on_demand"
instance_types = ["h100x8"]
max_nodes = 4
scheduler = "slurm"
"#;

    fn check(extra: &str) -> Result<Option<SlurmOptions>, String> {
        let text = format!("{BASE}{extra}");
        let cfg = Config::parse("c.toml", &text).map_err(|e| e.to_string())?;
        SlurmOptions::from_config("c.toml", &text, &cfg)
    }

    #[test]
    fn a_good_table_resolves_its_nodes() {
        let o =
            check("[slurm]\nnodes = [{ names = \"c[1-4]\", pools = [\"cloud-spot\"], gpus = 8 }]\n").unwrap().unwrap();
        assert_eq!(o.node_names().len(), 4);
    }

    #[test]
    fn bad_tables_name_the_key() {
        for (extra, want) in [
            ("", "no [slurm] table"),
            ("[slurm]\nnodes = [{ names = \"c[1-\", pools = [\"cloud-spot\"], gpus = 8 }]\n", "nodes[0].names"),
            ("[slurm]\nnodes = [{ names = \"c1\", pools = [\"nope\"], gpus = 8 }]\n", "unknown pool `nope`"),
            ("[slurm]\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 16 }]\n", "nodes[0].gpus"),
            ("[slurm]\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8, tier = \"p9\" }]\n", "p9"),
            ("[slurm]\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8 }]\nbogus = 1\n", "bogus"),
            (
                "[slurm]\nteam = \"ghost\"\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8 }]\n",
                "team: `ghost`",
            ),
            (
                "[slurm]\nconf = \"/nonexistent/slurm.conf\"\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8 }]\n",
                "conf: /nonexistent",
            ),
            (
                "[slurm]\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8 }]\n\
                 partitions = [{ name = \"a\", tier = \"p1\" }, { name = \"a\", tier = \"p2\" }]\n",
                "partitions[1].name",
            ),
            (
                "[slurm]\nnodes = [{ names = \"c1\", pools = [\"cloud-spot\"], gpus = 8 }]\n\
                 partitions = [{ name = \"a\", tier = \"p1\", team = \"nope\" }]\n",
                "partitions[0].team",
            ),
            (
                "[slurm]\nnodes = [{ names = \"c[1-2]\", pools = [\"cloud-spot\"], gpus = 8 }, \
                 { names = \"c2\", pools = [\"cloud-spot\"], gpus = 8 }]\n",
                "node c2 is in node set 0",
            ),
        ] {
            let e = check(extra).unwrap_err();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }
}
