//! Where the AWS provider launches: each pool's region and zone against the provider's region, its zones and the
//! configured subnets (checked once at startup, so a pool that could never launch where its config says is an
//! error then, not a node in another zone later); which subnets a launch in a zone may use; and the spot price
//! history read as one current price per type and zone.

use crate::errors::brief;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use spillway_providers::SpotQuote;
use std::collections::BTreeMap;

/// Where a pool of the cluster config says its nodes run.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPlace {
    pub name: String,
    pub region: Option<String>,
    pub zone: Option<String>,
}

/// Refuses a pool in another region than the provider's (one daemon launches in one region), by its `region`
/// or by its `zone` (an AWS zone's name is its region's and a letter); the error names the pool and both.
pub fn check_regions(region: &str, pools: &[PoolPlace]) -> Result<(), String> {
    for p in pools {
        if let Some(r) = p.region.as_deref().filter(|&r| r != region) {
            return Err(format!(
                "pool {:?} is in region {r}, but the AWS provider launches in {region} ([provider] region): one \
                 daemon launches in one region",
                p.name
            ));
        }
        if let Some(z) = p.zone.as_deref().filter(|z| !z.starts_with(region)) {
            return Err(format!(
                "pool {:?}: zone {z} is not a zone of {region}, the region the AWS provider launches in",
                p.name
            ));
        }
    }
    Ok(())
}

/// Refuses a pool whose zone is not a zone of the region (`region_zones`), or, where subnets are configured
/// (`subnet_zones`: subnet, its zone), a zone none of them is in.
pub fn check_zones(
    pools: &[PoolPlace],
    region_zones: &[String],
    subnet_zones: &[(String, String)],
) -> Result<(), String> {
    for p in pools {
        let Some(zone) = p.zone.as_deref() else { continue };
        if !region_zones.iter().any(|z| z == zone) {
            return Err(format!(
                "pool {:?}: zone {zone} is not a zone of this region (its zones: {})",
                p.name,
                region_zones.join(", ")
            ));
        }
        if !subnet_zones.is_empty() && !subnet_zones.iter().any(|(_, z)| z == zone) {
            let listed: Vec<String> = subnet_zones.iter().map(|(s, z)| format!("{s} in {z}")).collect();
            return Err(format!(
                "pool {:?}: zone {zone} has none of the [provider] subnets ({}): add a subnet of that zone",
                p.name,
                listed.join(", ")
            ));
        }
    }
    Ok(())
}

/// Returns the subnets a launch may use: those in `zone` when it names one, else all of them (in config order).
pub fn launch_subnets(subnet_zones: &[(String, String)], zone: Option<&str>) -> Vec<String> {
    subnet_zones.iter().filter(|(_, z)| zone.is_none_or(|want| want == z)).map(|(s, _)| s.clone()).collect()
}

/// Returns each configured subnet with its zone, in config order; an unknown subnet is an error naming it.
pub async fn subnet_zones(ec2: &Client, subnets: &[String]) -> Result<Vec<(String, String)>, String> {
    if subnets.is_empty() {
        return Ok(Vec::new());
    }
    let out = match ec2.describe_subnets().set_subnet_ids(Some(subnets.to_vec())).send().await {
        Ok(out) => out,
        Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidSubnetID")) => {
            // AWS names the subnets it does not know in the message.
            return Err(format!("[provider] subnets: {}", e.message().unwrap_or("a subnet does not exist")));
        }
        Err(e) => return Err(format!("[provider] subnets: {}", brief("DescribeSubnets", &e))),
    };
    let found: BTreeMap<&str, &str> =
        out.subnets().iter().filter_map(|s| Some((s.subnet_id()?, s.availability_zone()?))).collect();
    subnets
        .iter()
        .map(|s| match found.get(s.as_str()) {
            Some(z) => Ok((s.clone(), (*z).to_string())),
            None => Err(format!("[provider] subnets: subnet {s} does not exist in this region")),
        })
        .collect()
}

/// Returns the names of the region's zones, sorted: every state (a zone that is impaired now is still a place
/// a pool may launch in once it recovers, and a daemon restarted during an incident must start).
pub async fn region_zones(ec2: &Client) -> Result<Vec<String>, String> {
    let out = ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| format!("checking the pools' zones: {}", brief("DescribeAvailabilityZones", &e)))?;
    let mut zones: Vec<String> =
        out.availability_zones().iter().filter_map(|z| z.zone_name()).map(str::to_string).collect();
    zones.sort();
    Ok(zones)
}

/// One answer of the spot price history: type, zone, price as text, and when it was set (epoch seconds).
pub type PriceAnswer = (String, String, String, i64);

/// Returns the current price per (type, zone) of `answers`, in (type, zone) order, only for zones in `zones`
/// when it is `Some` (those the provider may launch in): the latest answer's, when it is a valid price (a finite
/// number > 0; a later answer that is not one leaves the zone unquoted rather than falling back to an older
/// price).
pub fn latest_per_zone(answers: &[PriceAnswer], zones: Option<&[String]>) -> Vec<SpotQuote> {
    let mut latest: BTreeMap<(&str, &str), (i64, &str)> = BTreeMap::new();
    for (t, zone, text, at) in answers {
        if zones.is_some_and(|zs| !zs.iter().any(|z| z == zone)) {
            continue;
        }
        let e = latest.entry((t.as_str(), zone.as_str())).or_insert((*at, text.as_str()));
        if *at > e.0 {
            *e = (*at, text.as_str());
        }
    }
    latest
        .into_iter()
        .filter_map(|((t, z), (_, text))| {
            let price = text.trim().parse::<f64>().ok().filter(|p| *p > 0.0 && p.is_finite())?;
            Some(SpotQuote { instance_type: t.to_string(), zone: Some(z.to_string()), usd_per_hour: price })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(name: &str, region: Option<&str>, zone: Option<&str>) -> PoolPlace {
        PoolPlace { name: name.into(), region: region.map(Into::into), zone: zone.map(Into::into) }
    }

    #[test]
    fn a_pool_in_another_region_or_zone_is_refused_by_name() {
        let pools = [place("od", None, None), place("spot-b", Some("us-east-1"), Some("us-east-1b"))];
        assert!(check_regions("us-east-1", &pools).is_ok());
        let e = check_regions("us-west-2", &pools).unwrap_err();
        assert!(e.contains("\"spot-b\"") && e.contains("us-east-1") && e.contains("us-west-2"), "{e}");
        let e = check_regions("us-east-1", &[place("w", None, Some("us-west-2a"))]).unwrap_err();
        assert!(e.contains("\"w\"") && e.contains("us-west-2a"), "a zone of another region: {e}");
        let zones = vec!["us-east-1a".to_string(), "us-east-1b".to_string()];
        assert!(check_zones(&pools, &zones, &[]).is_ok());
        let e = check_zones(&[place("x", None, Some("us-east-1z"))], &zones, &[]).unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("us-east-1z") && e.contains("us-east-1a"), "{e}");
        let subnets = vec![("subnet-1".to_string(), "us-east-1a".to_string())];
        let e = check_zones(&pools, &zones, &subnets).unwrap_err();
        assert!(e.contains("\"spot-b\"") && e.contains("subnet-1 in us-east-1a"), "{e}");
    }

    #[test]
    fn a_launch_in_a_zone_uses_only_that_zones_subnets() {
        let s = |id: &str, z: &str| (id.to_string(), z.to_string());
        let subnets = vec![s("subnet-a1", "us-east-1a"), s("subnet-b", "us-east-1b"), s("subnet-a2", "us-east-1a")];
        assert_eq!(launch_subnets(&subnets, Some("us-east-1a")), vec!["subnet-a1", "subnet-a2"]);
        assert_eq!(launch_subnets(&subnets, None).len(), 3);
        assert!(launch_subnets(&subnets, Some("us-east-1c")).is_empty());
    }

    #[test]
    fn the_latest_valid_price_per_zone_counts_and_other_zones_are_left_out() {
        let a = |t: &str, z: &str, p: &str, at: i64| (t.to_string(), z.to_string(), p.to_string(), at);
        let answers = [
            a("p3.2xlarge", "us-east-1a", "0.95", 10),
            a("p3.2xlarge", "us-east-1a", "0.91", 20),
            a("p3.2xlarge", "us-east-1b", "1.20", 5),
            a("p3.2xlarge", "us-east-1c", "0.10", 5),
            a("g5.xlarge", "us-east-1a", "nan", 30),
            a("g5.xlarge", "us-east-1a", "0", 30),
            a("g5.xlarge", "us-east-1a", "x", 30),
            a("g5.xlarge", "us-east-1b", "0.40", 10),
            a("g5.xlarge", "us-east-1b", "nan", 20),
        ];
        let zones = ["us-east-1a".to_string(), "us-east-1b".to_string()];
        let got = latest_per_zone(&answers, Some(&zones));
        let q =
            |z: &str, p: f64| SpotQuote { instance_type: "p3.2xlarge".into(), zone: Some(z.into()), usd_per_hour: p };
        assert_eq!(got, vec![q("us-east-1a", 0.91), q("us-east-1b", 1.20)]);
        // Only the latest answer counts: garbage after a valid price leaves the zone unquoted.
        assert_eq!(latest_per_zone(&answers, None).len(), 3);
    }
}
