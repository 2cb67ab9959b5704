//! Spot prices a provider quoted, as the engine's price events: a pool that names a zone gets that zone's price
//! as its own; the instance type's price (what pools without a zone pay) is the lowest quote over the zones.
//! Moves smaller than [`PRICE_STEP`] are left out: each change is a log entry and a decision pass.

use spillway_core::{Config, Event, Market};
use spillway_providers::SpotQuote;

/// Relative change of a spot price below which the engine keeps the price it has.
pub const PRICE_STEP: f64 = 0.02;
/// Highest price per hour the engine takes.
const MAX_PRICE: f64 = 1.0e6;

/// Returns whether the engine takes `q`'s price (a finite number > 0, at most [`MAX_PRICE`]).
pub fn valid(q: &SpotQuote) -> bool {
    q.usd_per_hour > 0.0 && q.usd_per_hour <= MAX_PRICE
}

/// Returns whether `price` moved by more than [`PRICE_STEP`] from `current`.
fn moved(current: Option<f64>, price: f64) -> bool {
    current.is_some_and(|c| (price - c).abs() > PRICE_STEP * c)
}

/// Returns the type-wide events `quotes` call for: per instance type the config sells spot of, the lowest valid
/// quote over the zones, where it moved from the type's price; in type order.
pub fn type_wide(cfg: &Config, quotes: &[SpotQuote]) -> Vec<Event> {
    cfg.instance_types
        .iter()
        .filter_map(|t| {
            let lowest = quotes
                .iter()
                .filter(|q| valid(q) && q.instance_type == t.name)
                .map(|q| q.usd_per_hour)
                .min_by(f64::total_cmp)?;
            moved(t.spot_usd_per_hour, lowest).then(|| Event::SpotPrice {
                instance_type: t.name.clone(),
                usd_per_hour: lowest,
                pool: None,
            })
        })
        .collect()
}

/// Returns the events for spot pools that name a zone: per instance type a pool sells, its zone's valid quote
/// (else one quoted for every zone), where it moved from the pool's price; in pool order.
pub fn per_zone(cfg: &Config, quotes: &[SpotQuote]) -> Vec<Event> {
    let mut out = Vec::new();
    for (p, pool) in cfg.pools.iter().enumerate() {
        let Some(zone) = pool.zone.as_deref().filter(|_| pool.market == Market::Spot) else { continue };
        for name in &pool.instance_types {
            let quoted = |z: Option<&str>| {
                quotes.iter().find(|q| valid(q) && &q.instance_type == name && q.zone.as_deref() == z)
            };
            let Some(q) = quoted(Some(zone)).or_else(|| quoted(None)) else { continue };
            let current = cfg.instance_type_index(name).and_then(|it| cfg.offer_price(p, it));
            if moved(current, q.usd_per_hour) {
                out.push(Event::SpotPrice {
                    instance_type: name.clone(),
                    usd_per_hour: q.usd_per_hour,
                    pool: Some(pool.name.clone()),
                });
            }
        }
    }
    out
}
