//! Time as a value: the core never reads a clock. A [`Time`] is milliseconds since the Unix epoch, handed in by
//! the shell (the simulator's virtual clock or the daemon's real one).

/// Milliseconds since the Unix epoch.
pub type Time = i64;

/// A duration in milliseconds.
pub type Millis = i64;

/// One hour in milliseconds.
pub const HOUR_MS: Millis = 3_600_000;

/// Returns `s` seconds as milliseconds, rounded to the nearest millisecond.
pub fn secs(s: f64) -> Millis {
    // Half away from zero by hand: `f64::round` is a library call on the baseline x86-64 target, and the
    // engine converts config seconds on every pass (the cast saturates, and NaN gives 0, as `round` would).
    let ms = s * 1000.0;
    (ms + 0.5f64.copysign(ms)) as Millis
}

/// Returns `secs` seconds in the one style every output of Spillway uses: `45s`, `12m05s`, `3h04m`, `2d03h`
/// (whole units, largest two); `-` for a negative or non-finite value.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    // `as` saturates: an absurd duration shows as the largest one rather than wrapping.
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Returns the days from 1970-01-01 to a proleptic Gregorian date. Years are counted from March, so the leap
/// day ends a year, and a 400-year era holds exactly 146,097 days.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719,468 days from 0000-03-01 to 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

/// Returns the date of a day count from 1970-01-01: the inverse of [`days_from_civil`].
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let d = day_of_year - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (year_of_era + era * 400 + i64::from(m <= 2), m, d)
}

/// Returns a millisecond duration in the style of [`fmt_duration`].
pub fn fmt_ms(ms: Millis) -> String {
    fmt_duration(to_secs(ms))
}

/// Returns a millisecond duration as seconds.
pub fn to_secs(ms: Millis) -> f64 {
    ms as f64 / 1000.0
}

/// Returns a millisecond duration as hours.
pub fn to_hours(ms: Millis) -> f64 {
    ms as f64 / 3_600_000.0
}
