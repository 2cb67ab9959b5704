//! `spillway forecast`: fit the forecaster on a demand series up to its last week, forecast that week with rolling
//! origins at 10 min, 30 min, 1 h, 2 h and `--horizon` ahead (parameters fitted once per horizon; the state then
//! takes each new bucket), print every method's errors beside persistence's and seasonal-naive's, overall and on the
//! buckets where demand rises, and write `forecast.csv` and `forecast.svg` for `--horizon`.

use anyhow::{Context, Result, bail};
use spillway_core::autoscale::forecast::{self, Method};
use spillway_sim::demand::{self, format_time};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Demand CSV with a `time` column (a Helios per-minute file, ../shared/traces/demand/*.csv).
    #[arg(long)]
    series: PathBuf,
    /// The column to forecast.
    #[arg(long, default_value = "running_gpu_num")]
    column: String,
    /// How far ahead each forecast is made: 30m, 1h, 1d, or seconds.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    horizon: f64,
    /// The bucket samples are averaged into before forecasting.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    bucket: f64,
    /// Directory for forecast.csv and forecast.svg.
    #[arg(long, default_value = "out/forecast")]
    out: PathBuf,
}

/// Returns the seconds a duration such as `90s`, `10m`, `1h30m`, `1d` or `600` names (the config's duration
/// style), if it is positive.
fn parse_duration(s: &str) -> Result<f64, String> {
    match spillway_core::config::parse_duration(s) {
        Ok(v) if v > 0.0 => Ok(v),
        Ok(_) => Err(format!("`{s}` is not a positive duration such as 10m or 1h")),
        Err(e) => Err(e),
    }
}

/// The horizons every report covers (seconds), beside `--horizon`.
const HORIZONS_S: [f64; 4] = [600.0, 1800.0, 3600.0, 7200.0];
/// A bucket counts as rising when demand at the target is more than this factor of demand at the origin.
const RISE: f64 = 1.10;

pub fn run(args: Args) -> Result<()> {
    let series = demand::load(&args.series, &args.column)?;
    let bucket_s = args.bucket;
    if let Some(i) = series.values.iter().position(|v| *v < 0.0) {
        bail!(
            "{}: value {} of `{}` is {}: demand cannot be negative",
            series.source,
            i + 1,
            series.column,
            series.values[i]
        );
    }
    let values = forecast::aggregate(&series.values, series.step_s(), bucket_s)?;
    let day = forecast::steps_per_day(bucket_s).context("--bucket")?;
    let week = day * 7;
    let steps = |horizon_s: f64| -> Result<usize> {
        let h = (horizon_s / bucket_s).round() as usize;
        if h == 0 || (h as f64 * bucket_s - horizon_s).abs() > 1e-6 || h > week {
            bail!("horizon {horizon_s} s must be a whole number of --bucket {bucket_s} s, at most a week");
        }
        Ok(h)
    };
    let h = steps(args.horizon).context("--horizon")?;
    let longest = HORIZONS_S.iter().filter_map(|&s| steps(s).ok()).max().unwrap_or(h).max(h);
    if values.len() < week + day + longest {
        bail!(
            "{}: {} buckets; holding out the last week needs at least {}",
            series.source,
            values.len(),
            week + day + longest
        );
    }
    let test_start = values.len() - week;
    let bucket_ms = (bucket_s * 1000.0).round() as i64;
    let time = |i: usize| format_time(series.start + bucket_ms * i as i64);
    println!(
        "{} `{}`: {} buckets of {bucket_s} s; train {} .. {} ({test_start} buckets), test the last week from {}",
        series.source,
        series.column,
        values.len(),
        time(0),
        time(test_start - 1),
        time(test_start)
    );
    println!("held-out last week, each bucket forecast from the buckets before the horizon (rolling origin);");
    println!("'rising': only the buckets whose demand is more than 10% above its value at the origin");
    println!(
        "  {:<8} {:<16} {:>8} {:>9} {:>13} {:>13} {:>7}",
        "horizon", "method", "MAPE", "RMSE", "rising MAPE", "rising RMSE", "chosen"
    );
    let mut horizons: Vec<f64> = HORIZONS_S.to_vec();
    if !horizons.contains(&args.horizon) {
        horizons.push(args.horizon);
    }
    let mut kept = None;
    for horizon_s in horizons {
        let Ok(hs) = steps(horizon_s) else { continue };
        let fitted = forecast::fit_for_horizon(&values[..test_start], bucket_s, hs)
            .context("fitting on the data before the last week")?;
        let rows = score_horizon(&values, bucket_s, test_start, hs, &fitted)?;
        if fitted.validation().is_empty() {
            println!(
                "  {:<8} (too little training history to validate other methods this far ahead: persistence)",
                duration_label(horizon_s)
            );
        }
        for row in &rows {
            println!(
                "  {:<8} {:<16} {:>8} {:>9.3} {:>13} {:>13} {:>7}",
                duration_label(horizon_s),
                row.name,
                pct(row.all.0),
                row.all.1,
                pct(row.rising.0),
                row.rising.1.map_or("n/a".into(), |r| format!("{r:.3}")),
                if row.chosen { "yes" } else { "" }
            );
        }
        if hs == h {
            kept = Some((fitted, rows));
        }
    }
    let Some((fitted, rows)) = kept else { bail!("--horizon: no forecast made") };
    println!("chosen for {}: {}", duration_label(args.horizon), fitted.method());
    write_outputs(&args, &series, &values, test_start, day, &fitted, &rows)
}

/// One method's errors on the held-out week at one horizon.
struct Scored {
    name: &'static str,
    chosen: bool,
    forecasts: Vec<f64>,
    /// (MAPE, RMSE) over every bucket.
    all: (Option<f64>, f64),
    /// (MAPE, RMSE) over the rising buckets.
    rising: (Option<f64>, Option<f64>),
}

/// Returns the errors of persistence, seasonal-naive, the best of each other family (as validated on the
/// training data) and the chosen method, each forecasting `values[test_start..]` `h` buckets ahead.
fn score_horizon(
    values: &[f64],
    bucket_s: f64,
    test_start: usize,
    h: usize,
    fitted: &forecast::Model,
) -> Result<Vec<Scored>> {
    let actual = &values[test_start..];
    let rising: Vec<usize> = (0..actual.len()).filter(|&i| actual[i] > RISE * values[test_start + i - h]).collect();
    let pick = |v: &[f64]| -> Vec<f64> { rising.iter().map(|&i| v[i]).collect() };
    let rising_actual = pick(actual);
    let mut methods: Vec<Method> = vec![Method::Persistence, Method::SeasonalNaive];
    for m in fitted.validation().iter().map(|c| c.method).chain([fitted.method()]) {
        if !methods.contains(&m) {
            methods.push(m);
        }
    }
    let mut out = Vec::new();
    for m in methods {
        let f = forecast::rolling(m, values, bucket_s, test_start, h)?;
        let rf = pick(&f);
        out.push(Scored {
            name: m.name(),
            chosen: m == fitted.method(),
            all: (forecast::mape(actual, &f), forecast::rmse(actual, &f).unwrap_or(f64::NAN)),
            rising: (forecast::mape(&rising_actual, &rf), forecast::rmse(&rising_actual, &rf)),
            forecasts: f,
        });
    }
    Ok(out)
}

/// Writes forecast.csv (the actual week and each method's forecasts at `--horizon`) and forecast.svg.
fn write_outputs(
    args: &Args,
    series: &demand::Series,
    values: &[f64],
    test_start: usize,
    day: usize,
    fitted: &forecast::Model,
    rows: &[Scored],
) -> Result<()> {
    let actual = &values[test_start..];
    let bucket_ms = (args.bucket * 1000.0).round() as i64;
    let time = |i: usize| format_time(series.start + bucket_ms * i as i64);
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut csv = String::from("time,actual");
    for r in rows {
        let _ = write!(csv, ",{}", r.name);
    }
    csv.push('\n');
    for (i, a) in actual.iter().enumerate() {
        let _ = write!(csv, "{},{a:.3}", time(test_start + i));
        for r in rows {
            let _ = write!(csv, ",{:.3}", r.forecasts[i]);
        }
        csv.push('\n');
    }
    let csv_path = args.out.join("forecast.csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    let title =
        format!("{} {}: last week, forecast {} ahead", series.source, series.column, duration_label(args.horizon));
    let days: Vec<(usize, String)> =
        (0..actual.len()).step_by(day).map(|i| (i, time(test_start + i).chars().take(10).collect())).collect();
    let chosen = rows.iter().find(|r| r.chosen).map_or(actual, |r| &r.forecasts);
    let of = |name: &str| rows.iter().find(|r| r.name == name).map_or(actual, |r| &r.forecasts);
    let mut lines = vec![("actual", "#222", actual, false), (fitted.method().name(), "#1f6fd1", chosen, false)];
    if fitted.method() != Method::Persistence {
        lines.push(("persistence", "#2a9d55", of("persistence"), true));
    }
    lines.push(("seasonal_naive", "#e07b00", of("seasonal_naive"), true));
    let svg = chart(&title, &days, &lines);
    let svg_path = args.out.join("forecast.svg");
    std::fs::write(&svg_path, svg).with_context(|| format!("writing {}", svg_path.display()))?;
    println!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(())
}

fn pct(mape: Option<f64>) -> String {
    mape.map_or("n/a".into(), |m| format!("{m:.2}%"))
}

fn duration_label(s: f64) -> String {
    match s {
        s if s % 86_400.0 == 0.0 => format!("{}d", s / 86_400.0),
        s if s % 3600.0 == 0.0 => format!("{}h", s / 3600.0),
        s if s % 60.0 == 0.0 => format!("{}m", s / 60.0),
        s => format!("{s}s"),
    }
}

/// Returns a self-contained SVG line chart of equally spaced series: `(name, colour, values, dashed)`, with a
/// vertical grid line and label at each `(index, label)`.
fn chart(title: &str, x_labels: &[(usize, String)], lines: &[(&str, &str, &[f64], bool)]) -> String {
    let (w, h, left, right, top, bottom) = (1200.0, 420.0, 60.0, 20.0, 40.0, 40.0);
    let n = lines.iter().map(|l| l.2.len()).max().unwrap_or(0).max(2);
    let top_value = lines.iter().flat_map(|l| l.2.iter().copied()).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let tick = nice_step(top_value / 6.0);
    let y_max = (top_value / tick).ceil() * tick;
    // Decimals a tick label needs: none for steps of 1 or more, one for 0.5, two for 0.05.
    let digits = (-tick.log10().floor()).max(0.0) as usize;
    let x = |i: usize| left + (w - left - right) * i as f64 / (n - 1) as f64;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / y_max);
    let grey = "stroke=\"#ddd\"";
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(s, "<text x=\"{left}\" y=\"20\" font-size=\"14\">{}</text>", escape(title));
    for k in 0..=(y_max / tick).round() as usize {
        let v = tick * k as f64;
        let (x2, yv, tx) = (w - right, y(v), left - 6.0);
        let _ = writeln!(s, "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{yv:.1}\" y2=\"{yv:.1}\" {grey}/>");
        let _ = writeln!(s, "<text x=\"{tx}\" y=\"{:.1}\" text-anchor=\"end\">{v:.digits$}</text>", yv + 4.0);
    }
    for (i, label) in x_labels {
        let (xi, yb) = (x(*i), h - bottom);
        let _ = writeln!(s, "<line x1=\"{xi:.1}\" x2=\"{xi:.1}\" y1=\"{top}\" y2=\"{yb}\" {grey}/>");
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{}\">{}</text>", xi + 4.0, yb + 16.0, escape(label));
    }
    for (k, (name, colour, values, dashed)) in lines.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let style = format!("stroke=\"{colour}\"{}", if *dashed { " stroke-dasharray=\"4 3\"" } else { "" });
        let _ = writeln!(s, "<polyline fill=\"none\" {style} stroke-width=\"1.2\" points=\"{}\"/>", points.join(" "));
        let (lx, ly) = (w - right - 160.0, top + 14.0 + 16.0 * k as f64);
        let _ =
            writeln!(s, "<line x1=\"{lx}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" {style} stroke-width=\"2\"/>", lx + 20.0);
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\">{}</text>", lx + 26.0, ly + 4.0, escape(name));
    }
    s.push_str("</svg>\n");
    s
}

/// Returns the smallest 1, 2 or 5 times a power of ten that is at least `raw`: a readable axis step.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-9).log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw).unwrap_or(10.0 * p)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_units() {
        let cases =
            [("10m", Ok(600.0)), ("1h", Ok(3600.0)), ("1.5h", Ok(5400.0)), ("1d", Ok(86_400.0)), ("90", Ok(90.0))];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), want, "{text}");
        }
        assert_eq!(parse_duration("1h30m"), Ok(5400.0));
        for bad in ["", "h", "0m", "-1h", "5w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_horizon_scores_the_baselines_the_families_and_the_choice_with_its_rising_buckets() {
        // Nine days of 10-minute buckets: a daily square wave (100 by night, 200 by day).
        let values: Vec<f64> = (0..9 * 144).map(|i| if (i % 144) < 72 { 100.0 } else { 200.0 }).collect();
        let test_start = values.len() - 144;
        let fitted = forecast::fit_for_horizon(&values[..test_start], 600.0, 6).expect("fits");
        let rows = score_horizon(&values, 600.0, test_start, 6, &fitted).expect("scores");
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(&names[..2], ["persistence", "seasonal_naive"]);
        assert_eq!(rows.iter().filter(|r| r.chosen).count(), 1, "exactly one row is the choice");
        // A pattern that repeats exactly: the chosen method forecasts it, persistence misses each step up.
        let chosen = rows.iter().find(|r| r.chosen).map(|r| r.all.1).unwrap_or(f64::NAN);
        assert!(chosen < 1e-9 && rows[0].all.1 > 10.0, "{chosen} vs persistence {}", rows[0].all.1);
        // The rising buckets are the 6 after the step up: persistence is 100 short on each.
        assert_eq!(rows[0].rising.1, Some(100.0));
    }

    #[test]
    fn the_chart_is_one_self_contained_svg() {
        let svg = chart(
            "a <b>",
            &[(0, "2020-05-25".into())],
            &[("actual", "#222", &[1.0, 2.0, 3.0], false), ("f", "#00f", &[1.0, f64::NAN, 2.0], true)],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt;b&gt;") && !svg.contains("NaN"));
        assert!(
            svg.contains(">0.5</text>") && svg.contains(">3.0</text>"),
            "tick labels with the decimals the step needs"
        );
        assert_eq!([nice_step(17.25), nice_step(52.0), nice_step(0.3), nice_step(100.0)], [20.0, 100.0, 0.5, 100.0]);
    }
}
