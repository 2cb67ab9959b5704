//! The AWS EC2 provider. Nodes are EC2 instances launched through `CreateFleet` type `instant` (on-demand with
//! `lowest-price`, spot with `price-capacity-optimized`) from the launch template the config names, each tagged
//! with the cluster, pool and node and booting a user-data script that starts `spillway agent`. The daemon's
//! reconcile lists instances by the cluster tag (adopting, terminating orphans); interruption, rebalance and
//! state-change events arrive through an SQS queue fed by EventBridge ([`notices`]).
//!
//! The SDK is async and the [`Provider`] trait is not (the daemon calls it from blocking threads): the provider
//! owns a small runtime and waits for each call on a channel, so it works from any thread, inside a runtime or not.

// A shell: the spot price history is asked "since now", which reads the clock (banned in decision code only).
#![allow(clippy::disallowed_methods)]

pub mod ec2;
pub mod errors;
pub mod notices;
pub mod options;
pub mod userdata;
pub mod zones;

pub use options::AwsOptions;
pub use zones::PoolPlace;

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use spillway_providers::{Instance, LaunchSpec, Notice, Provider, ProviderError, SpotQuote};
use std::future::Future;

/// Messages one SQS poll takes at most, and how long it waits for the first.
const SQS_BATCH: i32 = 10;
const SQS_WAIT_S: i32 = 1;
/// Attempts per call, with the SDK's jittered exponential backoff between them (throttling included).
const MAX_ATTEMPTS: u32 = 5;

/// The AWS provider (see the module doc).
pub struct AwsProvider {
    opts: AwsOptions,
    ec2: aws_sdk_ec2::Client,
    sqs: aws_sdk_sqs::Client,
    /// The region it launches in.
    region: String,
    /// The configured subnets with their zones, in config order (read at startup).
    subnet_zones: Vec<(String, String)>,
    /// Taken on drop and shut down in the background, which is allowed inside another runtime.
    rt: Option<tokio::runtime::Runtime>,
}

impl AwsProvider {
    /// Builds the clients (credentials from the SDK's default chain) and checks that they work and that the
    /// launch template exists, so a bad setup is an error at startup, not at the first scale-out.
    pub fn new(opts: AwsOptions) -> Result<AwsProvider, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spillway-aws")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the AWS runtime: {e}"))?;
        let (region, endpoint) = (opts.region.clone(), opts.endpoint_url.clone());
        let sdk = run_on(&rt, async move {
            // Bounded, so a hung endpoint is an error (at startup, or a failed call the daemon retries), never a
            // daemon stuck in a call.
            let timeouts = aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(std::time::Duration::from_secs(5))
                .operation_attempt_timeout(std::time::Duration::from_secs(30))
                .operation_timeout(std::time::Duration::from_secs(90))
                .build();
            let mut loader = aws_config::defaults(BehaviorVersion::latest())
                .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
                .timeout_config(timeouts);
            if let Some(r) = region {
                loader = loader.region(Region::new(r));
            }
            if let Some(url) = endpoint {
                loader = loader.endpoint_url(url);
            }
            loader.load().await
        })?;
        let Some(region) = sdk.region().map(|r| r.to_string()) else {
            return Err("no AWS region: set [provider] region or AWS_REGION".into());
        };
        let mut p = AwsProvider {
            ec2: aws_sdk_ec2::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            opts,
            region,
            subnet_zones: Vec::new(),
            rt: Some(rt),
        };
        let (ec2, sqs, opts) = (p.ec2.clone(), p.sqs.clone(), p.opts.clone());
        p.subnet_zones = p.run(async move {
            ec2::check(&ec2, &opts).await?;
            check_queue(&sqs, &opts).await?;
            zones::subnet_zones(&ec2, &opts.subnets).await
        })??;
        Ok(p)
    }

    /// Checks that every pool can launch where the config places it: in this provider's region, in a zone of
    /// it, and, where subnets are configured, a zone one of them is in. The error names the pool.
    pub fn check_pools(&self, pools: &[PoolPlace]) -> Result<(), String> {
        zones::check_regions(&self.region, pools)?;
        if pools.iter().all(|p| p.zone.is_none()) {
            return Ok(());
        }
        let ec2 = self.ec2.clone();
        let region_zones = self.run(async move { zones::region_zones(&ec2).await })??;
        zones::check_zones(pools, &region_zones, &self.subnet_zones)
    }

    /// Runs `f` on the provider's runtime and waits for it.
    fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
        match &self.rt {
            Some(rt) => run_on(rt, f),
            None => Err("the AWS runtime is shut down".into()),
        }
    }

    /// Like [`AwsProvider::run`] for provider calls: a lost runtime is a transient error.
    fn call<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, ProviderError>> + Send + 'static,
    ) -> Result<T, ProviderError> {
        self.run(f).map_err(ProviderError::Transient)?
    }
}

/// Spawns `f` on `rt` and blocks this thread until it is done (a channel, not `block_on`, so the caller may be
/// inside another runtime's blocking thread or a plain thread alike).
fn run_on<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    f: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv().map_err(|_| "an AWS call was dropped before it finished".to_string())
}

impl Drop for AwsProvider {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Provider for AwsProvider {
    fn launch(&self, spec: &LaunchSpec) -> Result<Instance, ProviderError> {
        let subnets = zones::launch_subnets(&self.subnet_zones, spec.zone.as_deref());
        if subnets.is_empty() && !self.subnet_zones.is_empty() {
            // `check_pools` refuses such a pool at startup; a spec from elsewhere gets a clear error.
            let zone = spec.zone.as_deref().unwrap_or("");
            return Err(ProviderError::Transient(format!("no [provider] subnet is in zone {zone}")));
        }
        let (ec2, opts, spec) = (self.ec2.clone(), self.opts.clone(), spec.clone());
        self.call(async move { ec2::launch(&ec2, &opts, &spec, &subnets).await })
    }

    fn terminate(&self, instance_id: &str) -> Result<(), ProviderError> {
        let (ec2, id) = (self.ec2.clone(), instance_id.to_string());
        self.call(async move { ec2::terminate(&ec2, &id).await })
    }

    fn list(&self, cluster: &str) -> Result<Vec<Instance>, ProviderError> {
        let (ec2, tag) = (self.ec2.clone(), ec2::cluster_filter(cluster));
        self.call(async move { ec2::describe(&ec2, &[tag]).await })
    }

    fn name(&self) -> &'static str {
        "aws"
    }

    /// The price in force in each zone it may launch in (those of the configured subnets, or any zone).
    fn spot_prices(&self, instance_types: &[String]) -> Result<Vec<SpotQuote>, ProviderError> {
        let (ec2, types) = (self.ec2.clone(), instance_types.to_vec());
        let answers = self.call(async move { ec2::spot_prices(&ec2, &types).await })?;
        let mut zones: Vec<String> = self.subnet_zones.iter().map(|(_, z)| z.clone()).collect();
        zones.sort();
        zones.dedup();
        Ok(zones::latest_per_zone(&answers, (!zones.is_empty()).then_some(zones.as_slice())))
    }

    /// Polls the interruption queue (long poll of a second); a message is deleted once read, garbage included
    /// (named on stderr), so a bad message cannot come back forever.
    fn notices(&self) -> Result<Vec<Notice>, ProviderError> {
        let Some(url) = self.opts.interruption_queue_url.clone() else {
            std::thread::sleep(std::time::Duration::from_secs(1));
            return Ok(Vec::new());
        };
        let sqs = self.sqs.clone();
        self.call(async move { poll_queue(&sqs, &url).await })
    }
}

/// Checks at startup that the interruption queue (if any) exists and can be read.
async fn check_queue(sqs: &aws_sdk_sqs::Client, o: &AwsOptions) -> Result<(), String> {
    let Some(url) = &o.interruption_queue_url else { return Ok(()) };
    match sqs.get_queue_attributes().queue_url(url).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            use aws_sdk_sqs::error::ProvideErrorMetadata;
            let why = e.code().map_or_else(|| aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(), str::to_string);
            Err(format!("interruption_queue_url {url:?}: {why}"))
        }
    }
}

/// Receives one batch from the queue at `url`, deletes it, and returns the notices in it.
async fn poll_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Vec<Notice>, ProviderError> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(SQS_BATCH)
        .wait_time_seconds(SQS_WAIT_S)
        .send()
        .await
        .map_err(|e| {
            ProviderError::Transient(format!("SQS ReceiveMessage: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))
        })?;
    let mut found = Vec::new();
    for m in out.messages() {
        match notices::parse(m.body().unwrap_or("")) {
            Ok(Some(n)) => found.push(n),
            Ok(None) => {}
            Err(e) => eprintln!("spillway: aws: ignoring SQS message {}: {e}", m.message_id().unwrap_or("?")),
        }
        if let Some(handle) = m.receipt_handle()
            && let Err(e) = sqs.delete_message().queue_url(url).receipt_handle(handle).send().await
        {
            // Not fatal: the message comes back after its visibility timeout and is handled again (notices are
            // idempotent in the daemon).
            eprintln!("spillway: aws: deleting SQS message: {}", aws_sdk_sqs::error::DisplayErrorContext(&e));
        }
    }
    Ok(found)
}
