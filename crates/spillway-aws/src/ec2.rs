//! The EC2 calls behind the provider: launch one node through `CreateFleet` type `instant` (its user-data in a
//! launch-template version of its own), list a cluster's instances by tag, terminate one.

use crate::errors::{classify, classify_code, is_not_found};
use crate::options::AwsOptions;
use crate::userdata::{AgentBoot, base64, script, slurm_script};
use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType, InstanceLifecycleType,
    InstanceStateName, InstanceType, OnDemandOptionsRequest, RequestLaunchTemplateData, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification, TargetCapacitySpecificationRequest,
};
use spillway_providers::{Instance, LaunchSpec, ProviderError};

/// Tag keys every instance carries.
pub const TAG_CLUSTER: &str = "spillway:cluster";
pub const TAG_POOL: &str = "spillway:pool";
pub const TAG_NODE: &str = "spillway:node";
pub const TAG_GPUS: &str = "spillway:gpus";
/// States in which an instance is this cluster's (it runs, or may run again).
const LIVE_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];
/// Node number given to a cluster's instance whose node tag is missing or bad: higher than any real node, so
/// the daemon's reconcile terminates it as an orphan.
pub const UNKNOWN_NODE: u32 = u32::MAX;

/// Returns the fleet's idempotency token for `spec`: one per (cluster, node), since a node id is launched once,
/// so a retry after a crash gets the first call's instance instead of a second one (at most 64 ASCII characters).
pub fn client_token(spec: &LaunchSpec) -> String {
    // FNV-1a of the cluster id keeps the token short whatever the cluster's name.
    let hash =
        spec.cluster.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("spillway-{hash:016x}-{}", spec.node)
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

fn filter(name: &str, values: &[&str]) -> Filter {
    values.iter().fold(Filter::builder().name(name), |f, v| f.values(*v)).build()
}

/// Launches one instance for `spec` unless one already runs for its node (then returns that one), in one of
/// `subnets` (those of the spec's zone; none: the template's network, in the spec's zone if it names one).
pub async fn launch(
    ec2: &Client,
    o: &AwsOptions,
    spec: &LaunchSpec,
    subnets: &[String],
) -> Result<Instance, ProviderError> {
    let node = spec.node.to_string();
    let existing = describe(
        ec2,
        &[filter(&format!("tag:{TAG_CLUSTER}"), &[&spec.cluster]), filter(&format!("tag:{TAG_NODE}"), &[&node])],
    )
    .await?;
    if let Some(i) = existing.into_iter().find(|i| i.node == spec.node) {
        return Ok(i);
    }
    let version = user_data_version(ec2, o, spec).await?;
    let fleet = create_fleet(ec2, o, spec, &version, subnets).await;
    // The version only carried this node's user-data (the instance keeps what it booted with): delete it in the
    // background, so the launch's answer (the instance id the daemon records) does not wait for that call.
    let delete = ec2.delete_launch_template_versions().launch_template_name(&o.launch_template).versions(&version);
    let template = o.launch_template.clone();
    tokio::spawn(async move {
        if let Err(e) = delete.send().await {
            let e = aws_sdk_ec2::error::DisplayErrorContext(&e);
            eprintln!("spillway: aws: deleting launch template version {version} of {template}: {e}");
        }
    });
    let (id, spot) = fleet?;
    Ok(spec.instance(id, spot))
}

/// Creates a version of the launch template that carries this node's user-data (and the AMI override, if any);
/// returns its number.
async fn user_data_version(ec2: &Client, o: &AwsOptions, spec: &LaunchSpec) -> Result<String, ProviderError> {
    let boot = AgentBoot {
        agent_path: &o.agent_path,
        server_url: &o.server_url,
        node: spec.node,
        gpus: spec.gpus,
        token: &spec.token,
        data_dir: &o.agent_data_dir,
        run_as: o.agent_run_as.as_deref(),
        imds_url: &o.imds_url,
    };
    let text = match &spec.slurm_node {
        Some(name) => slurm_script(spec.node, name, &o.slurmd, &o.slurmd_args),
        None => script(&boot),
    };
    let mut data = RequestLaunchTemplateData::builder().user_data(base64(text.as_bytes()));
    if let Some(ami) = &o.image_id {
        data = data.image_id(ami);
    }
    let out = ec2
        .create_launch_template_version()
        .launch_template_name(&o.launch_template)
        .source_version(&o.launch_template_version)
        .version_description(format!("spillway node {} of {}", spec.node, spec.cluster))
        .launch_template_data(data.build())
        .send()
        .await
        .map_err(|e| classify("CreateLaunchTemplateVersion", &e, &spec.instance_type))?;
    out.launch_template_version()
        .and_then(|v| v.version_number())
        .map(|n| n.to_string())
        .ok_or_else(|| ProviderError::Transient("CreateLaunchTemplateVersion returned no version number".into()))
}

/// Calls `CreateFleet` type `instant` for one instance of the spec's type over `subnets` (or, without any, in
/// the spec's zone if it names one); returns the instance id and whether it is spot, or the typed error of the
/// fleet's answer.
async fn create_fleet(
    ec2: &Client,
    o: &AwsOptions,
    spec: &LaunchSpec,
    version: &str,
    subnets: &[String],
) -> Result<(String, bool), ProviderError> {
    let itype = InstanceType::from(spec.instance_type.as_str());
    let template = FleetLaunchTemplateSpecificationRequest::builder()
        .launch_template_name(&o.launch_template)
        .version(version)
        .build();
    let mut config = FleetLaunchTemplateConfigRequest::builder().launch_template_specification(template);
    if subnets.is_empty() {
        let mut only = FleetLaunchTemplateOverridesRequest::builder().instance_type(itype.clone());
        if let Some(zone) = &spec.zone {
            only = only.availability_zone(zone);
        }
        config = config.overrides(only.build());
    }
    for subnet in subnets {
        config = config.overrides(
            FleetLaunchTemplateOverridesRequest::builder().instance_type(itype.clone()).subnet_id(subnet).build(),
        );
    }
    let market = if spec.spot { DefaultTargetCapacityType::Spot } else { DefaultTargetCapacityType::OnDemand };
    let capacity = TargetCapacitySpecificationRequest::builder()
        .total_target_capacity(1)
        .default_target_capacity_type(market)
        .build();
    let node = spec.node.to_string();
    let gpus = spec.gpus.to_string();
    // EC2 tag values hold at most 256 characters.
    let name: String = format!("spillway-{}-node-{}", spec.cluster, spec.node).chars().take(256).collect();
    let tags = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .tags(tag(TAG_CLUSTER, &spec.cluster))
        .tags(tag(TAG_POOL, &spec.pool))
        .tags(tag(TAG_NODE, &node))
        .tags(tag(TAG_GPUS, &gpus))
        .tags(tag("Name", &name))
        .build();
    let out = ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .client_token(client_token(spec))
        .launch_template_configs(config.build())
        .target_capacity_specification(capacity)
        .spot_options(
            SpotOptionsRequest::builder().allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized).build(),
        )
        .on_demand_options(
            OnDemandOptionsRequest::builder().allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice).build(),
        )
        .tag_specifications(tags)
        .send()
        .await
        .map_err(|e| classify("CreateFleet", &e, &spec.instance_type))?;
    for inst in out.instances() {
        if let Some(id) = inst.instance_ids().first() {
            let spot = inst.lifecycle().is_some_and(|l| l.as_str() == "spot");
            return Ok((id.clone(), spot));
        }
    }
    // No instance: the fleet's errors say why (one per override it tried); capacity wins over the rest, since
    // the engine then tries another offering.
    let errors: Vec<ProviderError> = out
        .errors()
        .iter()
        .map(|e| {
            classify_code(e.error_code().unwrap_or("Unknown"), e.error_message().unwrap_or(""), &spec.instance_type)
        })
        .collect();
    Err(errors
        .iter()
        .find(|e| matches!(e, ProviderError::InsufficientCapacity { .. }))
        .or_else(|| errors.iter().find(|e| matches!(e, ProviderError::Quota(_))))
        .or(errors.first())
        .cloned()
        .unwrap_or_else(|| ProviderError::Transient("CreateFleet returned neither an instance nor an error".into())))
}

/// Returns the live instances matching `filters`, in node order.
pub async fn describe(ec2: &Client, filters: &[Filter]) -> Result<Vec<Instance>, ProviderError> {
    let mut req = ec2.describe_instances().filters(filter("instance-state-name", &LIVE_STATES));
    for f in filters {
        req = req.filters(f.clone());
    }
    let mut pages = req.into_paginator().send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| classify("DescribeInstances", &e, ""))?;
        for r in page.reservations() {
            out.extend(r.instances().iter().filter_map(to_instance));
        }
    }
    out.sort_by(|a, b| (a.node, &a.id).cmp(&(b.node, &b.id)));
    Ok(out)
}

/// Reads an instance's tags into the provider's view; `None` for one without an id or cluster tag.
fn to_instance(i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let tag = |k: &str| i.tags().iter().find(|t| t.key() == Some(k)).and_then(|t| t.value()).map(str::to_string);
    Some(Instance {
        id: i.instance_id()?.to_string(),
        cluster: tag(TAG_CLUSTER)?,
        node: tag(TAG_NODE).and_then(|n| n.parse().ok()).unwrap_or(UNKNOWN_NODE),
        pool: tag(TAG_POOL).unwrap_or_default(),
        instance_type: i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        gpus: tag(TAG_GPUS).and_then(|g| g.parse().ok()).unwrap_or(0),
        spot: i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot),
    })
}

/// Terminates instance `id`; `NotFound` when it does not exist or is already shutting down or gone.
pub async fn terminate(ec2: &Client, id: &str) -> Result<(), ProviderError> {
    let found = match ec2.describe_instances().instance_ids(id).send().await {
        Ok(out) => out.reservations().iter().flat_map(|r| r.instances()).any(|i| {
            let state = i.state().and_then(|s| s.name());
            !matches!(state, Some(InstanceStateName::ShuttingDown | InstanceStateName::Terminated))
        }),
        Err(e) if is_not_found(&e) => false,
        Err(e) => return Err(classify("DescribeInstances", &e, "")),
    };
    if !found {
        return Err(ProviderError::NotFound(id.to_string()));
    }
    match ec2.terminate_instances().instance_ids(id).send().await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Err(ProviderError::NotFound(id.to_string())),
        Err(e) => Err(classify("TerminateInstances", &e, "")),
    }
}

/// Checks at startup that the credentials work and the launch template exists; the error says which failed.
pub async fn check(ec2: &Client, o: &AwsOptions) -> Result<(), String> {
    match ec2.describe_launch_templates().launch_template_names(&o.launch_template).send().await {
        Ok(out) if !out.launch_templates().is_empty() => Ok(()),
        Ok(_) => Err(format!("launch template {:?} does not exist", o.launch_template)),
        Err(e) => {
            use aws_sdk_ec2::error::ProvideErrorMetadata;
            match e.code() {
                Some(c) if crate::errors::is_auth(c) => {
                    Err(format!("AWS refused the credentials or permissions ({c}): {}", e.message().unwrap_or("")))
                }
                Some("InvalidLaunchTemplateName.NotFoundException") => {
                    Err(format!("launch template {:?} does not exist", o.launch_template))
                }
                _ => Err(format!("DescribeLaunchTemplates: {}", aws_sdk_ec2::error::DisplayErrorContext(&e))),
            }
        }
    }
}

/// Returns the filter for a cluster's instances.
pub fn cluster_filter(cluster: &str) -> Filter {
    filter(&format!("tag:{TAG_CLUSTER}"), &[cluster])
}

/// Returns the spot price history of `types` since now (Linux/UNIX): the price in force in each zone, as
/// (type, zone, price text, epoch seconds) answers for [`crate::zones::latest_per_zone`].
pub async fn spot_prices(ec2: &Client, types: &[String]) -> Result<Vec<crate::zones::PriceAnswer>, ProviderError> {
    let mut req = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .start_time(aws_sdk_ec2::primitives::DateTime::from(std::time::SystemTime::now()));
    for t in types {
        req = req.instance_types(InstanceType::from(t.as_str()));
    }
    let mut pages = req.into_paginator().send();
    let mut seen = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| classify("DescribeSpotPriceHistory", &e, ""))?;
        for p in page.spot_price_history() {
            if let (Some(t), Some(zone), Some(price)) = (p.instance_type(), p.availability_zone(), p.spot_price()) {
                let at = p.timestamp().map_or(0, |d| d.secs());
                seen.push((t.as_str().to_string(), zone.to_string(), price.to_string(), at));
            }
        }
    }
    Ok(seen)
}
