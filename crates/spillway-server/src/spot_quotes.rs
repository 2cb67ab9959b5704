//! Spot prices a provider quoted, as the engine's price events, one per spot pool and instance type: a pool that
//! names a zone pays that zone's price, a pool without one the lowest over the zones the provider may launch in.
//! Every event names its pool, so no pool's price follows another zone's through the instance type's. A quote
//! replaces a pool's configured `spot_usd_per_hour` too (the cloud's price of the moment wins over an estimate);
//! a pool whose zone has no valid quote keeps its price. Moves smaller than [`PRICE_STEP`] are left out: each
//! change is a log entry and a decision pass.

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

/// Returns the events `quotes` call for: per spot pool (in config order) and instance type it sells, the
/// quoted price where it moved by more than [`PRICE_STEP`] from the pool's.
pub fn events(cfg: &Config, quotes: &[SpotQuote]) -> Vec<Event> {
    let mut out = Vec::new();
    for (p, pool) in cfg.pools.iter().enumerate().filter(|(_, pool)| pool.market == Market::Spot) {
        for name in &pool.instance_types {
            let Some(price) = quoted(quotes, name, pool.zone.as_deref()) else { continue };
            let current = cfg.instance_type_index(name).and_then(|it| cfg.offer_price(p, it));
            if current.is_some_and(|c| (price - c).abs() > PRICE_STEP * c) {
                out.push(Event::SpotPrice {
                    instance_type: name.clone(),
                    usd_per_hour: price,
                    pool: Some(pool.name.clone()),
                });
            }
        }
    }
    out
}

/// Returns the valid price of `instance_type` for a pool in `zone`: that zone's quote (else one quoted for
/// every zone); for a pool without a zone, the lowest quote.
fn quoted(quotes: &[SpotQuote], instance_type: &str, zone: Option<&str>) -> Option<f64> {
    let of_type = || quotes.iter().filter(|q| valid(q) && q.instance_type == instance_type);
    match zone {
        Some(z) => of_type()
            .find(|q| q.zone.as_deref() == Some(z))
            .or_else(|| of_type().find(|q| q.zone.is_none()))
            .map(|q| q.usd_per_hour),
        None => of_type().map(|q| q.usd_per_hour).min_by(f64::total_cmp),
    }
}
