//! Cloud providers for Spillway: the synchronous [`Provider`] trait the daemon drives (from
//! `tokio::task::spawn_blocking`), its typed [`ProviderError`]s, a [`conformance`] suite every provider's tests
//! run, and the [`local`] provider, which runs each node as a `spillway agent` process on this machine.

pub mod conformance;
pub mod local;
pub mod procfs;
mod records;

pub use conformance::{check_capacity, run_conformance};
pub use local::{LocalOptions, LocalProvider};

/// What to launch: one node of the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchSpec {
    /// Cluster id: tags instances so `list()` only sees this cluster's.
    pub cluster: String,
    /// The engine's node id (unique per cluster, never reused).
    pub node: u32,
    pub pool: String,
    /// The offering's instance type; "fixed" for fixed nodes.
    pub instance_type: String,
    pub gpus: u32,
    pub spot: bool,
    /// The node's agent token.
    pub token: String,
    /// Injected boot latency (the local provider passes it to the agent).
    pub boot_delay_s: f64,
    /// The node's name in Slurm when Slurm asked for it: the node runs `slurmd -N <name>`, not an agent.
    pub slurm_node: Option<String>,
    /// The pool's zone (`us-east-1a`): a cloud provider launches the node there; `None`: in any zone it may.
    pub zone: Option<String>,
}

impl LaunchSpec {
    /// Returns the instance this spec launched as `id` (`spot`: the market it got).
    pub fn instance(&self, id: String, spot: bool) -> Instance {
        Instance {
            id,
            cluster: self.cluster.clone(),
            node: self.node,
            pool: self.pool.clone(),
            instance_type: self.instance_type.clone(),
            gpus: self.gpus,
            spot,
        }
    }
}

/// A running node as the provider knows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    pub id: String,
    pub cluster: String,
    pub node: u32,
    pub pool: String,
    pub instance_type: String,
    pub gpus: u32,
    pub spot: bool,
}

/// Why a provider call failed, typed so the engine can react per kind (back off one offering, give up on a
/// node, retry later) instead of parsing messages.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("insufficient capacity for {instance_type}")]
    InsufficientCapacity { instance_type: String },
    #[error("quota exceeded: {0}")]
    Quota(String),
    #[error("instance {0} not found")]
    NotFound(String),
    #[error("transient provider error: {0}")]
    Transient(String),
}

/// A source of nodes. Synchronous on purpose: the daemon calls it from `spawn_blocking`, and real cloud SDK
/// calls as well as process management block anyway.
pub trait Provider: Send + Sync {
    /// Starts one node; returns its instance. Errors are typed so the engine can back off the offering only.
    fn launch(&self, spec: &LaunchSpec) -> Result<Instance, ProviderError>;
    /// Stops an instance and everything it runs; NotFound if this provider does not know it (already gone).
    fn terminate(&self, instance_id: &str) -> Result<(), ProviderError>;
    /// The live instances of `cluster` (tagged at launch), in node order.
    fn list(&self, cluster: &str) -> Result<Vec<Instance>, ProviderError>;
    /// Provider name for messages ("local", "aws", ...).
    fn name(&self) -> &'static str;
    /// Returns what the cloud said about instances since the last call (interruption warnings, rebalance
    /// recommendations, instances that stopped or went away), waiting a moment for news; each notice is returned
    /// once. The daemon polls this in a loop. Default: a provider with no notices (the local provider injects
    /// interruptions in the daemon instead).
    fn notices(&self) -> Result<Vec<Notice>, ProviderError> {
        std::thread::sleep(std::time::Duration::from_secs(1));
        Ok(Vec::new())
    }
    /// Returns the cloud's current spot prices of those of `instance_types` it knows, one per zone it may
    /// launch in (or one without a zone, where the cloud prices a type alike everywhere); a type it does not
    /// answer for keeps the config's price. Default: none.
    fn spot_prices(&self, instance_types: &[String]) -> Result<Vec<SpotQuote>, ProviderError> {
        let _ = instance_types;
        Ok(Vec::new())
    }
}

/// One spot price the cloud quoted: an instance type's price per hour in one zone.
#[derive(Debug, Clone, PartialEq)]
pub struct SpotQuote {
    pub instance_type: String,
    /// The zone it holds in; `None`: every zone the provider launches in.
    pub zone: Option<String>,
    pub usd_per_hour: f64,
}

/// Something the cloud said about one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub instance_id: String,
    pub kind: NoticeKind,
}

/// What a [`Notice`] says.
#[derive(Debug, Clone, PartialEq)]
pub enum NoticeKind {
    /// The instance will be reclaimed at `deadline_ms` (ms since the epoch; `None`: the pool's notice from now).
    Interruption { deadline_ms: Option<i64> },
    /// The instance is at elevated risk of interruption: move its work before the reclaim comes.
    Rebalance,
    /// The instance left the running states (`state`: stopping, stopped, shutting-down, terminated).
    Gone { state: String },
}
