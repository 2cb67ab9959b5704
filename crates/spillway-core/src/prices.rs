//! Live spot prices: the daemon polls the cloud's spot price per instance type, and the simulator replays price
//! traces per offering; both hand changes in as [`crate::Event::SpotPrice`]. Spot is billed at the price of the
//! moment, so a change re-prices every live node of the offering from that instant: the books close the node's
//! segment at the old price and open one at the new ([`crate::cluster::Cluster::reprice`]). Offerings compare on
//! the new price from then on. Without an event the config's price holds.

use crate::config::Market;
use crate::engine::EventError;
use crate::event::DecisionKind;
use crate::state::Engine;

impl Engine {
    /// Sets the spot price of `instance_type`: in `pool` only when named (refused for an unknown or non-spot
    /// pool), else in every spot pool without its own price. Ignored for an unknown type or one not sold as spot
    /// there; refused when not a finite price > 0. Recorded when it changes; live nodes are re-priced and the
    /// tiers' pool order (cheapest per GPU first) follows.
    pub(crate) fn spot_price(
        &mut self,
        instance_type: &str,
        pool: Option<&str>,
        usd_per_hour: f64,
    ) -> Result<(), EventError> {
        if !(usd_per_hour > 0.0 && usd_per_hour <= 1.0e6) {
            return Err(EventError::BadPrice { instance_type: instance_type.to_string(), usd_per_hour });
        }
        let Some(it) = self.cfg.instance_type_index(instance_type) else { return Ok(()) };
        let pools: Vec<usize> = match pool {
            Some(name) => {
                let bad =
                    || EventError::BadPrice { instance_type: format!("{instance_type} in pool {name}"), usd_per_hour };
                let p = self.cfg.pools.iter().position(|p| p.name == name).ok_or_else(bad)?;
                if self.cfg.pools[p].market != Market::Spot {
                    return Err(bad());
                }
                vec![p]
            }
            None => (0..self.cfg.pools.len())
                .filter(|&p| self.cfg.pools[p].market == Market::Spot)
                .filter(|&p| !self.cfg.pools[p].spot_usd_per_hour.contains_key(instance_type))
                .collect(),
        };
        let old = match pool {
            Some(_) => pools.first().and_then(|&p| self.cfg.offer_price(p, it)),
            None => self.cfg.instance_types[it].spot_usd_per_hour,
        };
        let Some(old) = old.filter(|&o| o != usd_per_hour) else { return Ok(()) };
        match pool {
            Some(_) => {
                for &p in &pools {
                    self.cfg.pools[p].spot_usd_per_hour.insert(instance_type.to_string(), usd_per_hour);
                }
            }
            None => self.cfg.instance_types[it].spot_usd_per_hour = Some(usd_per_hour),
        }
        for &p in &pools {
            self.c.reprice(p, it, usd_per_hour, self.now);
        }
        self.pool_order = (0..self.cfg.tiers.len()).map(|t| crate::access::pool_order(&self.cfg, t)).collect();
        let scope = pool.map_or(String::new(), |p| format!(" in pool {p}"));
        self.record(
            DecisionKind::Admin,
            || format!("instance_type:{instance_type}"),
            "spot_price",
            || format!("spot price{scope} ${old:.4}/h -> ${usd_per_hour:.4}/h"),
        );
        Ok(())
    }
}
