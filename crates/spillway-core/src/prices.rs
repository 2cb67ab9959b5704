//! Live spot prices: the daemon polls the cloud's spot price per instance type and hands changes in as
//! [`crate::Event::SpotPrice`]; offerings then compare on it and nodes launched from then on cost it (nodes already
//! running keep the price they were launched at). Without an event the config's price holds.

use crate::engine::EventError;
use crate::event::DecisionKind;
use crate::state::Engine;

impl Engine {
    /// Sets the spot price of `instance_type`; ignored for an unknown type or one the config sells no spot of,
    /// refused when not a finite price > 0. Recorded when it changes; the tiers' pool order (cheapest per GPU
    /// first) follows it.
    pub(crate) fn spot_price(&mut self, instance_type: &str, usd_per_hour: f64) -> Result<(), EventError> {
        if !(usd_per_hour > 0.0 && usd_per_hour.is_finite()) {
            return Err(EventError::BadPrice { instance_type: instance_type.to_string(), usd_per_hour });
        }
        let Some(i) = self.cfg.instance_type_index(instance_type) else { return Ok(()) };
        let Some(old) = self.cfg.instance_types[i].spot_usd_per_hour else { return Ok(()) };
        if old == usd_per_hour {
            return Ok(());
        }
        self.cfg.instance_types[i].spot_usd_per_hour = Some(usd_per_hour);
        self.pool_order = (0..self.cfg.tiers.len()).map(|t| crate::access::pool_order(&self.cfg, t)).collect();
        self.record(
            DecisionKind::Admin,
            || format!("instance_type:{instance_type}"),
            "spot_price",
            || format!("spot price ${old:.4}/h -> ${usd_per_hour:.4}/h"),
        );
        Ok(())
    }
}
