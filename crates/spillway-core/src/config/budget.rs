//! Team budgets (`[[budgets]]`) and where their alerts go (`[alerts]`): a team may spend `usd` per UTC day or
//! month; alerts fire as its spend crosses each share of that in `alert_at` (default 50%, 80%, 100%); with
//! `hard_cap`, once it is spent no cloud capacity is bought for the team's work until the period ends (its jobs
//! still run on capacity there is).

use super::ConfigError;
use super::validate::Ctx;
use crate::time::Time;
use chrono::{Datelike, TimeZone, Utc};
use serde::Deserialize;

/// The calendar period a budget covers, in UTC.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    /// Returns the period's name as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// Returns the start (ms since the epoch) of the period that holds `t`.
    pub fn start(self, t: Time) -> Time {
        let day = t.div_euclid(86_400_000) * 86_400_000;
        match self {
            Period::Day => day,
            Period::Month => {
                let Some(d) = Utc.timestamp_millis_opt(day).single() else { return day };
                Utc.with_ymd_and_hms(d.year(), d.month(), 1, 0, 0, 0).single().map_or(day, |m| m.timestamp_millis())
            }
        }
    }

    /// Returns the start of the period after the one that holds `t`.
    pub fn next(self, t: Time) -> Time {
        let start = self.start(t);
        match self {
            Period::Day => start + 86_400_000,
            Period::Month => {
                let Some(d) = Utc.timestamp_millis_opt(start).single() else { return start + 31 * 86_400_000 };
                let (y, m) = if d.month() == 12 { (d.year() + 1, 1) } else { (d.year(), d.month() + 1) };
                Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
                    .single()
                    .map_or(start + 31 * 86_400_000, |n| n.timestamp_millis())
            }
        }
    }
}

/// A team's budget for a period.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub team: String,
    pub period: Period,
    /// USD the team may spend in one period (its cost by team, as `spillway cost` books it).
    pub usd: f64,
    /// Once `usd` is spent, buy no cloud capacity for the team's work until the period ends.
    #[serde(default)]
    pub hard_cap: bool,
    /// Shares of `usd` whose crossing raises an alert, ascending.
    #[serde(default = "default_alerts")]
    pub alert_at: Vec<f64>,
}

fn default_alerts() -> Vec<f64> {
    vec![0.5, 0.8, 1.0]
}

/// Where budget alerts go besides the event log.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Alerts {
    /// An `http://` URL that gets each alert as a JSON POST (retried); absent: the event log only.
    pub webhook: Option<String>,
}

/// Checks `[[budgets]]` and `[alerts]`: known teams, one budget per team and period, a positive finite amount,
/// ascending shares in (0, 10], an http URL.
pub(super) fn check(cx: &Ctx, budgets: &[Budget], alerts: &Alerts, teams: &[super::Team]) -> Result<(), ConfigError> {
    for (i, b) in budgets.iter().enumerate() {
        if !teams.iter().any(|t| t.name == b.team) {
            return Err(cx.err("budgets", Some(i), "team", format!("no team `{}` in [[teams]]", b.team)));
        }
        if budgets[..i].iter().any(|o| o.team == b.team && o.period == b.period) {
            let what = format!("team `{}` has two {} budgets", b.team, b.period.as_str());
            return Err(cx.err("budgets", Some(i), "period", what));
        }
        if !(b.usd.is_finite() && b.usd > 0.0) {
            return Err(cx.err("budgets", Some(i), "usd", "must be a finite number of USD > 0".into()));
        }
        let ascending = b.alert_at.windows(2).all(|w| w[0] < w[1]);
        if !ascending || b.alert_at.iter().any(|a| !(*a > 0.0 && *a <= 10.0)) {
            let what = "must be ascending shares of the budget in (0, 10], e.g. [0.5, 0.8, 1.0]";
            return Err(cx.err("budgets", Some(i), "alert_at", what.into()));
        }
    }
    if let Some(url) = &alerts.webhook
        && !http_url_ok(url)
    {
        let what =
            format!("{url:?} is not an http:// URL with a host (and a port up to 65535); https is not supported yet");
        return Err(cx.err("alerts", None, "webhook", what));
    }
    Ok(())
}

/// Returns whether `url` is an `http://` URL (any case) with a host, an optional port up to 65535, and no
/// whitespace or control characters anywhere.
pub(super) fn http_url_ok(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) || url.len() < 8 {
        return false;
    }
    let Some(rest) = url.get(..7).filter(|s| s.eq_ignore_ascii_case("http://")).and_then(|_| url.get(7..)) else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (h, Some(p)),
        _ => (authority, None),
    };
    !host.is_empty() && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn webhook_urls_must_be_sendable() {
        for ok in ["http://h/x", "HTTP://h:8080/a?b=1", "http://10.0.0.1:9000"] {
            assert!(http_url_ok(ok), "{ok}");
        }
        for bad in
            ["https://h/", "http://", "http://h h/", "http://h:99999/", "http://h:0/", "http://h/a\r\nX: y", "ftp://h/"]
        {
            assert!(!http_url_ok(bad), "{bad}");
        }
    }

    #[test]
    fn periods_follow_the_utc_calendar() {
        let t = at("2026-12-31T23:59:59Z");
        assert_eq!(Period::Day.start(t), at("2026-12-31T00:00:00Z"));
        assert_eq!(Period::Day.next(t), at("2027-01-01T00:00:00Z"));
        assert_eq!(Period::Month.start(t), at("2026-12-01T00:00:00Z"));
        assert_eq!(Period::Month.next(t), at("2027-01-01T00:00:00Z"));
        let leap = at("2028-02-29T12:00:00Z");
        assert_eq!(Period::Month.start(leap), at("2028-02-01T00:00:00Z"));
        assert_eq!(Period::Month.next(leap), at("2028-03-01T00:00:00Z"));
        assert_eq!(Period::Month.start(at("2026-03-01T00:00:00Z")), at("2026-03-01T00:00:00Z"));
    }
}
