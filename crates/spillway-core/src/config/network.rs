//! Where pools are and what moving a job's data between them costs: a pool's `region`, and `[network]` with the
//! price per GB of a transfer between two regions and the bandwidth it moves at. Prices come from the config's
//! `[[network.egress]]` entries first, then AWS's published inter-region prices (built in, 1,122 region pairs),
//! then `egress_usd_per_gb`. Within one region a move is free and instant (AWS bills cross-zone traffic at about
//! $0.01/GB; a checkpoint read from regional object storage pays nothing).

use super::validate::Ctx;
use super::{ConfigError, secs};
use serde::Deserialize;
use std::collections::BTreeMap;

/// AWS inter-region data transfer prices, `from_region,to_region,price_usd_per_gb` (public price list, 2025).
const AWS_EGRESS_CSV: &str = include_str!("../../data/aws_egress_usd_per_gb.csv");

/// The longest a move's transfer is taken to last (30 days).
pub const MAX_TRANSFER_MS: i64 = 30 * 86_400_000;
/// Most USD per GB of egress a price may say (the dearest public inter-region price is about $0.15).
const MAX_USD_PER_GB: f64 = 1000.0;

/// The `[network]` table.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// USD per GB moved between two regions that no entry and no built-in price names.
    #[serde(default = "default_usd_per_gb")]
    pub egress_usd_per_gb: f64,
    /// Gigabits per second a checkpoint moves at between regions (its transfer time is its size over this).
    #[serde(default = "default_gbps")]
    pub transfer_gbps: f64,
    /// Prices per region pair that win over the built-in ones (one direction each).
    #[serde(default)]
    pub egress: Vec<EgressPrice>,
    /// Seconds added to every move between regions besides the transfer (a restore, a warm-up).
    #[serde(default, deserialize_with = "secs::de")]
    pub move_overhead_s: f64,
}

/// The price of moving data from one region to another.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EgressPrice {
    pub from: String,
    pub to: String,
    pub usd_per_gb: f64,
}

impl Default for Network {
    fn default() -> Network {
        Network {
            egress_usd_per_gb: default_usd_per_gb(),
            transfer_gbps: default_gbps(),
            egress: Vec::new(),
            move_overhead_s: 0.0,
        }
    }
}

fn default_usd_per_gb() -> f64 {
    0.02
}

fn default_gbps() -> f64 {
    10.0
}

/// Prices per (from, to) region: the config's entries over the built-in AWS table. Built only for a config whose
/// pools name regions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressTable {
    prices: BTreeMap<(String, String), f64>,
    default_usd_per_gb: f64,
    /// Milliseconds to move one GB (0 when the bandwidth is unbounded).
    ms_per_gb: f64,
    overhead_ms: i64,
}

impl EgressTable {
    /// Returns the table of `net`: the built-in prices, then its entries over them.
    pub fn new(net: &Network) -> EgressTable {
        let mut prices = BTreeMap::new();
        for line in AWS_EGRESS_CSV.lines().skip(1) {
            let mut f = line.split(',');
            if let (Some(a), Some(b), Some(p)) = (f.next(), f.next(), f.next().and_then(|p| p.trim().parse().ok())) {
                prices.insert((a.to_string(), b.to_string()), p);
            }
        }
        for e in &net.egress {
            prices.insert((e.from.clone(), e.to.clone()), e.usd_per_gb);
        }
        EgressTable {
            prices,
            default_usd_per_gb: net.egress_usd_per_gb,
            ms_per_gb: 8_000.0 / net.transfer_gbps,
            overhead_ms: (net.move_overhead_s * 1000.0).round() as i64,
        }
    }

    /// Returns (USD, milliseconds) to move `gb` GB from region `from` to region `to`: nothing within a region.
    pub fn cost(&self, from: &str, to: &str, gb: f64) -> (f64, i64) {
        if from == to || gb <= 0.0 {
            return (0.0, 0);
        }
        let usd_per_gb = self.prices.get(&(from.to_string(), to.to_string())).copied();
        let usd = gb * usd_per_gb.unwrap_or(self.default_usd_per_gb);
        // Shipping the data would beat a transfer of over a month; the cap keeps times far inside the clock.
        let ms = (gb * self.ms_per_gb).ceil().min(MAX_TRANSFER_MS as f64) as i64;
        (usd, ms.saturating_add(self.overhead_ms))
    }
}

/// Checks `[network]`: prices finite and >= 0, a bandwidth > 0, entries naming two regions.
pub(super) fn check(cx: &Ctx, net: &Network) -> Result<(), ConfigError> {
    let e = |key: &str, msg: String| cx.err("network", None, key, msg);
    let price = |v: f64| format!("must be a price from 0 to {MAX_USD_PER_GB} USD per GB, got {v:e}");
    if !(0.0..=MAX_USD_PER_GB).contains(&net.egress_usd_per_gb) {
        return Err(e("egress_usd_per_gb", price(net.egress_usd_per_gb)));
    }
    // Under 10 Mbit/s a checkpoint of any size takes days: a unit mistake (the key is in gigabits).
    if !(0.01..=1.0e6).contains(&net.transfer_gbps) {
        let why = format!("must be a bandwidth from 0.01 to 1000000 Gbit/s, got {:e}", net.transfer_gbps);
        return Err(e("transfer_gbps", why));
    }
    if !(net.move_overhead_s >= 0.0 && net.move_overhead_s <= 7.0 * 86_400.0) {
        return Err(e("move_overhead_s", "must be from 0 to 7 days".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in net.egress.iter().enumerate() {
        let e = |key: &str, msg: String| cx.err("network.egress", Some(i), key, msg);
        for (key, region) in [("from", &p.from), ("to", &p.to)] {
            check_region(region).map_err(|m| e(key, m))?;
        }
        if p.from == p.to {
            return Err(e("to", format!("is `from` again: a move within {} is free", p.to)));
        }
        if !seen.insert((&p.from, &p.to)) {
            return Err(e("to", format!("{} to {} is priced twice", p.from, p.to)));
        }
        if !(0.0..=MAX_USD_PER_GB).contains(&p.usd_per_gb) {
            return Err(e("usd_per_gb", price(p.usd_per_gb)));
        }
    }
    Ok(())
}

/// Checks a region's name as clouds write them: lowercase letters, digits and `-` (`us-east-1`, `eastus`), so a
/// job's `US-EAST-1` is refused rather than billed as a move. Returns what is wrong.
pub fn check_region(name: &str) -> Result<(), String> {
    check_place(name, "region", "us-east-1")
}

/// Checks a region's or zone's name (`kind`, with an `example`): 1-64 of a-z, 0-9 and `-`.
pub(crate) fn check_place(name: &str, kind: &str, example: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if name.is_empty() || name.len() > 64 || !name.chars().all(ok) {
        let shown: String = name.chars().take(64).collect();
        return Err(format!("`{shown}` is not a {kind} name (1-64 of a-z, 0-9 and -, as `{example}`)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_costs_the_pair_price_the_config_wins_and_a_region_moves_to_itself_free() {
        let mut net = Network::default();
        let t = EgressTable::new(&net);
        assert_eq!(t.cost("us-east-1", "us-east-1", 50.0), (0.0, 0));
        let (usd, ms) = t.cost("us-east-1", "us-west-2", 50.0);
        assert!((usd - 1.0).abs() < 1e-9, "AWS prices US to US at $0.02/GB: {usd}");
        assert_eq!(ms, 40_000, "50 GB at 10 Gbit/s");
        assert!((t.cost("ap-east-2", "us-east-2", 10.0).0 - 0.8).abs() < 1e-9);
        assert!((t.cost("nowhere-1", "elsewhere-2", 10.0).0 - 0.2).abs() < 1e-9, "unknown pairs pay the default");
        net.egress.push(EgressPrice { from: "us-east-1".into(), to: "us-west-2".into(), usd_per_gb: 0.5 });
        net.move_overhead_s = 60.0;
        let t = EgressTable::new(&net);
        assert_eq!(t.cost("us-east-1", "us-west-2", 2.0), (1.0, 61_600));
        assert!((t.cost("us-west-2", "us-east-1", 1.0).0 - 0.02).abs() < 1e-9, "one direction per entry");
    }
}
