//! The instants of a cost window (`spillway cost --since/--until`): RFC 3339 UTC times as the tables print them,
//! ten-digit epoch seconds, or ages counted back from now in the config's duration style.

use crate::ctl::now;
use spillway_core::time::{civil_from_days, days_from_civil};

/// Returns an instant for the cost window as seconds since the epoch, from an RFC 3339 UTC time as the tables
/// print it (`2026-12-02T05:40:00Z`), seconds since the epoch, or an age counted back from now (`90s`, `30m`,
/// `1h30m`, `1d`, as durations are written in the config).
pub fn instant(s: &str) -> anyhow::Result<String> {
    let now = now();
    let usage = |why: String| -> anyhow::Error { crate::client::CliError { code: 2, message: why }.into() };
    if let Some(at) = parse_time(s) {
        return Ok(format!("{at}"));
    }
    if let Ok(x) = s.trim().parse::<f64>() {
        // Ten digits make an epoch time of this century; fewer are surely an age written without its unit.
        if !(1e9..=now + 86_400.0 * 366.0 * 100.0).contains(&x) {
            return Err(usage(format!(
                "`{s}` is not a time: an epoch time has ten digits; for an age give its unit (`{s}s`, `{s}m`)"
            )));
        }
        return Ok(format!("{x}"));
    }
    match spillway_core::config::parse_duration(s) {
        Ok(age) if age >= 0.0 && age <= now => Ok(format!("{:.3}", now - age)),
        Ok(_) => Err(usage(format!("`{s}` reaches back before 1970"))),
        Err(_) => Err(usage(format!(
            "`{s}` is not a time: give a time like 2026-12-02T05:40:00Z, seconds since the epoch, or an age like \
             90s, 30m, 1h30m, 1d"
        ))),
    }
}

/// Returns the epoch seconds of an RFC 3339 time `YYYY-MM-DDTHH:MM:SS[.fff]` with `Z` or an offset `±HH:MM` (the
/// tables print the `Z` form, [`crate::ctl::fmt_time`]), or `None`; a date that does not exist (Feb 30) is `None`.
pub fn parse_time(s: &str) -> Option<f64> {
    let s = s.trim();
    let (s, offset_s) = match s.strip_suffix(['Z', 'z']) {
        Some(rest) => (rest, 0),
        None => split_offset(s)?,
    };
    let (date, time) = s.split_once(['T', 't', ' '])?;
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.chars().all(|c| c.is_ascii_digit())).then(|| t.parse().ok()).flatten()
    };
    let mut d = date.splitn(3, '-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (hh, mm) = (num(t.next()?)?, num(t.next()?)?);
    let sec: f64 = t.next()?.parse().ok().filter(|x: &f64| (0.0..61.0).contains(x))?;
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 {
        return None;
    }
    let days = days_from_civil(y, m, day);
    // A day past the month's end (Feb 30) lands in the next month; the round trip catches it.
    if civil_from_days(days) != (y, m, day) {
        return None;
    }
    Some((days * 86_400 + hh * 3600 + mm * 60 - offset_s) as f64 + sec)
}

/// Splits a trailing `±HH:MM` offset off `s`; returns the rest and the offset in seconds.
fn split_offset(s: &str) -> Option<(&str, i64)> {
    let at = s.len().checked_sub(6)?;
    let (rest, off) = (s.get(..at)?, s.get(at..)?);
    let sign = match off.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = off.get(1..)?.split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 23 && m <= 59 && h.to_string().len() <= 2).then_some((rest, sign * (h * 3600 + m * 60)))
}
