//! Durations in a config: a number of seconds (`90`, `1.5`) or a string with a unit (`"90s"`, `"5m"`, `"2h"`,
//! `"1d"`, `"1h30m"`), as the CLI takes them. Every `*_s` key reads through here.

use serde::{Deserialize, Deserializer, de::Error};

/// The longest duration a config takes: 100 years. Larger ones are refused, not read as "never": they turn into
/// instants past the end of time, and a timer that overflows fires at once (an idle timeout of 1e300 s removed idle
/// nodes the moment they went idle).
pub const MAX_SECS: f64 = 100.0 * 365.0 * 86_400.0;

/// A duration as written.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Seconds(f64),
    Text(String),
}

/// Deserializes a duration in seconds.
pub(super) fn de<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match Written::deserialize(d)? {
        Written::Seconds(s) => within(s, &s.to_string()).map_err(D::Error::custom),
        Written::Text(t) => parse(&t).map_err(D::Error::custom),
    }
}

/// Deserializes an optional duration in seconds.
pub(super) fn de_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de(d).map(Some)
}

/// Parses `"90s"`, `"5m"`, `"2h"`, `"1d"`, `"1h30m"` or a bare number (seconds) into seconds.
pub fn parse(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let bad = || {
        format!("`{text}` is not a duration (a number of seconds, or e.g. \"90s\", \"5m\", \"2h\", \"1d\", \"1h30m\")")
    };
    if let Ok(x) = t.parse::<f64>() {
        return within(x, text);
    }
    let (mut total, mut num, mut any) = (0.0, String::new(), false);
    for c in t.chars() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            'd' => 86_400.0,
            _ => return Err(bad()),
        };
        let n: f64 = num.parse().map_err(|_| bad())?;
        total += n * unit;
        num.clear();
        any = true;
    }
    if !any || !num.is_empty() {
        return Err(bad());
    }
    within(total, text)
}

/// Returns `secs` when it is at most [`MAX_SECS`] (NaN and infinities are refused elsewhere, with their key).
pub fn within(secs: f64, written: &str) -> Result<f64, String> {
    if secs.is_finite() && secs > MAX_SECS {
        return Err(format!("`{written}` is longer than 100 years, the longest duration a config takes"));
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_numbers_read_as_seconds() {
        for (t, s) in [("90", 90.0), ("1.5", 1.5), ("90s", 90.0), ("5m", 300.0), ("2h", 7200.0), ("1d", 86_400.0)] {
            assert_eq!(parse(t), Ok(s), "{t}");
        }
        assert_eq!(parse("1h30m"), Ok(5400.0));
        for t in ["", "m", "5x", "5m3", "1..5s", "-", "999999999999d", "1.5e300", "3153600001"] {
            assert!(parse(t).is_err(), "{t}");
        }
    }
}
