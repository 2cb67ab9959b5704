//! Scheduled policies: cron windows that set a pool's min, max or desired nodes while open. A window's state is
//! kept until it next changes, so a pass evaluates the cron expression only when a window opened or closed.

use crate::config::Config;
use crate::time::{Time, secs};
use std::str::FromStr;

/// A compiled scheduled policy: a cron window that sets a pool's min, max or desired nodes while open.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) pool: usize,
    cron: croner::Cron,
    tz: chrono_tz::Tz,
    duration_ms: i64,
    pub(crate) min_nodes: Option<u32>,
    pub(crate) max_nodes: Option<u32>,
    pub(crate) desired_nodes: Option<u32>,
    /// The state last computed: (at, open, next change). It holds from `at` until the next change, so a pass
    /// evaluates the cron expression only when the window opened or closed since (see [`Window::refresh`]).
    known: Option<(Time, bool, Option<Time>)>,
}

impl Window {
    /// Compiles the config's schedules (validated already, so parsing cannot fail here; a failure skips it).
    pub fn compile(cfg: &Config) -> Vec<Window> {
        cfg.schedules
            .iter()
            .filter_map(|s| {
                Some(Window {
                    pool: cfg.pools.iter().position(|p| p.name == s.pool)?,
                    cron: croner::Cron::from_str(&s.cron).ok()?,
                    tz: chrono_tz::Tz::from_str(&s.timezone).ok()?,
                    duration_ms: secs(s.duration_s),
                    min_nodes: s.min_nodes,
                    max_nodes: s.max_nodes,
                    desired_nodes: s.desired_nodes,
                    known: None,
                })
            })
            .collect()
    }

    /// Returns whether the window is open at `now`, and the next time its state may change: the state kept by
    /// the last [`Window::refresh`] while it holds, else computed.
    pub(crate) fn state(&self, now: Time) -> (bool, Option<Time>) {
        match self.known {
            Some((_, open, next)) if self.holds(now) => (open, next),
            _ => self.compute(now),
        }
    }

    /// Returns whether the kept state is the state at `now`.
    fn holds(&self, now: Time) -> bool {
        matches!(self.known, Some((at, _, next)) if at <= now && next.is_none_or(|n| now < n))
    }

    /// Keeps the state at `now` (time never runs backwards in the engine, so it holds until its next change).
    pub(crate) fn refresh(&mut self, now: Time) {
        if !self.holds(now) {
            let (open, next) = self.compute(now);
            self.known = Some((now, open, next));
        }
    }

    /// Evaluates the cron expression: whether the window is open at `now`, and when that next changes.
    fn compute(&self, now: Time) -> (bool, Option<Time>) {
        use chrono::TimeZone;
        let at = |t: Time| self.tz.timestamp_millis_opt(t).single();
        // Whole seconds: the cron library carries the start's fraction of a second into the occurrence it finds,
        // and cron times fall on whole minutes anyway.
        let Some(from) = at((now - self.duration_ms).div_euclid(1000) * 1000) else { return (false, None) };
        match self.cron.find_next_occurrence(&from, false) {
            Ok(fire) if fire.timestamp_millis() <= now => (true, Some(fire.timestamp_millis() + self.duration_ms)),
            Ok(fire) => (false, Some(fire.timestamp_millis())),
            Err(_) => (false, None),
        }
    }
}
