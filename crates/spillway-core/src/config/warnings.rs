//! Settings that are valid but very likely not what the user meant, found after validation: `config check`
//! prints them and the daemon logs them at start. None of them stops anything.

use super::{Config, Market};

impl Config {
    /// Returns a warning, in words, for each likely mistake: spot priced at or above on-demand; a tier whose jobs
    /// may only use owned nodes or cloud pools whose simulated `capacity` is 0, which never grow, so work beyond
    /// them waits for ever; a waiting budget capped below its fixed part; `burst_early` on a tier without a
    /// waiting budget; a cloud pool without a region beside
    /// pools with one; a schedule whose window never opens.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, t) in self.instance_types.iter().enumerate() {
            if let Some(spot) = t.spot_usd_per_hour.filter(|&s| s >= t.on_demand_usd_per_hour) {
                out.push(format!(
                    "instance_types[{i}] ({}): spot_usd_per_hour {spot} is at or above on_demand_usd_per_hour {}: \
                     spot would save nothing and can be reclaimed",
                    t.name, t.on_demand_usd_per_hour
                ));
            }
        }
        for t in &self.tiers {
            if t.burst_wait_max_s < t.burst_after_s {
                out.push(format!(
                    "tier {}: burst_wait_max_s ({}) is below burst_after_s ({}): every job of it waits only {}",
                    t.name,
                    crate::time::fmt_duration(t.burst_wait_max_s),
                    crate::time::fmt_duration(t.burst_after_s),
                    crate::time::fmt_duration(t.burst_wait_max_s)
                ));
            }
            if t.burst_early && t.burst_after_s == 0.0 && t.burst_wait_per_gpu_hour_s == 0.0 {
                out.push(format!(
                    "tier {}: burst_early is set but the tier has no waiting budget (burst_after_s and \
                     burst_wait_per_gpu_hour_s are 0): its jobs never wait for owned capacity, so it changes nothing",
                    t.name
                ));
            }
            let usable: Vec<usize> = (0..self.pools.len())
                .filter(|&i| t.markets.contains(&self.pools[i].market) && !self.pools[i].external())
                .collect();
            // A cloud pool whose every instance type has a simulated capacity of 0 never grows either.
            let never_grows = |i: usize| {
                let p = &self.pools[i];
                p.market == Market::Fixed || p.instance_types.iter().all(|t| p.capacity.get(t) == Some(&0))
            };
            if !usable.is_empty() && usable.iter().all(|&i| never_grows(i)) {
                let gpus = usable.iter().flat_map(|&i| &self.pools[i].nodes).map(|n| n.count.saturating_mul(n.gpus));
                let gpus = gpus.fold(0u32, u32::saturating_add);
                out.push(format!(
                    "tier {}: its markets ({}) leave it only capacity that never grows ({gpus} owned GPUs): its work \
                     beyond that waits; add a cloud pool of a market it may use",
                    t.name,
                    t.markets.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if self.pools.iter().any(|p| p.region.is_some()) {
            for (i, p) in self.pools.iter().enumerate().filter(|(_, p)| p.market != Market::Fixed && p.region.is_none())
            {
                out.push(format!(
                    "pools[{i}] ({}): no region, while other pools have one: a job with data starts there without \
                     moving it (data moves and egress go by region)",
                    p.name
                ));
            }
        }
        let windows = crate::window::Window::compile(self);
        for (i, w) in windows.iter().enumerate() {
            // Looked for over the four years after the calendar's start: a cron of Feb 29 opens once in four.
            let (open, next) = w.state(self.start_ms);
            if !open && next.is_none_or(|n| n > self.start_ms + 4 * 366 * 86_400_000) {
                let s = &self.schedules[i];
                out.push(format!("schedules[{i}]: cron `{}` never opens a window (pool {})", s.cron, s.pool));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: &str = "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"A100\"\n\
                         on_demand_usd_per_hour = 30.0\nspot_usd_per_hour = 31.0\n";

    #[test]
    fn likely_mistakes_are_warned_about() {
        let text = format!(
            "{TYPES}[[pools]]\nname = \"own\"\nmarket = \"fixed\"\nnodes = [{{ count = 1, gpus = 8 }}]\n\
             [[pools]]\nname = \"spot\"\nmarket = \"spot\"\ninstance_types = [\"g8\"]\nmax_nodes = 4\n\
             [[schedules]]\npool = \"spot\"\ncron = \"0 0 30 2 *\"\nduration_s = 60\nmin_nodes = 1\n\
             [tiers.p0]\nburst_early = true\n\
             [tiers.p1]\nburst_after_s = \"10m\"\nburst_wait_max_s = \"5m\"\n"
        );
        let cfg = Config::parse("c.toml", &text).unwrap();
        let w = cfg.warnings();
        assert!(w.iter().any(|s| s.contains("g8") && s.contains("at or above")), "{w:#?}");
        assert!(w.iter().any(|s| s.starts_with("tier p0:") && s.contains("8 owned GPUs")), "{w:#?}");
        assert!(w.iter().any(|s| s.starts_with("tier p1:") && s.contains("waits only 5m")), "{w:#?}");
        assert!(w.iter().any(|s| s.starts_with("tier p0:") && s.contains("burst_early")), "{w:#?}");
        let never_grows = |s: &&String| s.contains("never grows");
        let tier_p12 = |s: &&String| s.starts_with("tier p1") || s.starts_with("tier p2");
        assert!(!w.iter().filter(tier_p12).any(|s| never_grows(&s)), "spot grows: {w:#?}");
        assert!(w.iter().any(|s| s.contains("schedules[0]") && s.contains("never opens")), "{w:#?}");
    }

    #[test]
    fn a_sound_config_has_no_warnings() {
        let text = format!(
            "{}[[pools]]\nname = \"spot\"\nmarket = \"spot\"\ninstance_types = [\"g8\"]\nmax_nodes = 4\n\
             [[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 2\n\
             [[schedules]]\npool = \"od\"\ncron = \"0 9 * * 1-5\"\nduration_s = 3600\nmin_nodes = 1\n",
            TYPES.replace("31.0", "12.0")
        );
        assert_eq!(Config::parse("c.toml", &text).unwrap().warnings(), Vec::<String>::new());
    }
}
