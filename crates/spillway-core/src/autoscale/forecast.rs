//! Demand forecasts for predictive scaling. A series sampled at a fixed step (minute samples averaged to buckets
//! with [`aggregate`]) is forecast by persistence (the last value) unless another candidate beats it clearly on a
//! validation slice at the end of the history, each candidate forecasting that slice from only the values before
//! it. Persistence is the floor because cluster demand moves like a random walk at an hour's range: a method that
//! is not anchored to the present loses to "the value now", and one that merely ties it is no reason to act.
//!
//! - persistence, the floor: the last value seen;
//! - seasonal-naive: the value one week earlier (one day earlier while history is shorter);
//! - anchored seasonal: the last value plus a share of the change the day and week before saw over the horizon;
//! - additive Holt-Winters with a damped trend and two seasons, daily and weekly (after Taylor, 2003);
//! - a seasonal blend: a weighted mix of the values one day and one week earlier, plus an exponentially smoothed
//!   residual that fades with the horizon (it carries the current level, which a seasonal lag alone misses).
//!
//! Parameters come from a fixed grid, so fitting is deterministic. A [`Model`] keeps its state: a shell fits
//! rarely and feeds each new sample to [`Model::observe`].

use std::collections::VecDeque;
use std::fmt;

const DAY_S: f64 = 86_400.0;
const DAYS_PER_WEEK: usize = 7;

const HW_ALPHAS: [f64; 8] = [0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0];
/// Trend smoothing with its damping per step; no trend (beta 0) needs no damping.
const HW_TRENDS: [(f64, f64); 5] = [(0.0, 1.0), (0.01, 0.9), (0.01, 0.98), (0.05, 0.9), (0.05, 0.98)];
const HW_GAMMAS: [f64; 6] = [0.0, 0.02, 0.05, 0.1, 0.2, 0.4];
const BLEND_DAY_WEIGHTS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
const BLEND_ALPHAS: [f64; 5] = [0.1, 0.25, 0.5, 0.75, 1.0];
const BLEND_PHIS: [f64; 6] = [0.5, 0.8, 0.9, 0.95, 0.99, 1.0];
const ANCHOR_SHARES: [f64; 6] = [0.05, 0.1, 0.2, 0.35, 0.5, 1.0];
const ANCHOR_DAY_WEIGHTS: [f64; 3] = [0.0, 0.5, 1.0];
/// How much lower than persistence's a candidate's validation RMSE must be for it to be chosen: a smaller edge on
/// one week is as likely noise as skill (on the shared Helios series, 1% edges became losses the week after).
const MUST_BEAT_PERSISTENCE_BY: f64 = 0.05;

/// Why a series cannot be forecast.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForecastError {
    /// The step is not positive or does not divide a day into whole steps.
    #[error("step {step_s} s must be > 0 and divide a day into at least 2 whole steps")]
    BadStep { step_s: f64 },
    /// The history is shorter than one day (or than one day before the first forecast origin).
    #[error("need at least one day of history ({need} steps of {step_s} s), have {have}")]
    TooShort { have: usize, need: usize, step_s: f64 },
    /// A history value is NaN or infinite.
    #[error("history value {index} is {value}: values must be finite")]
    NonFinite { index: usize, value: f64 },
    /// A bucket is not a whole number of steps.
    #[error("bucket {bucket_s} s is not a whole multiple of the step {step_s} s")]
    BadBucket { bucket_s: f64, step_s: f64 },
}

/// A forecasting method with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    /// The last value seen.
    Persistence,
    /// The value one week earlier; one day earlier while the history is shorter than a week.
    SeasonalNaive,
    /// The last value plus `share` x the change over the horizon one period earlier: `day_weight` of the day
    /// before's, the rest of the week before's (the day's alone while less than a week has been seen).
    Anchored { share: f64, day_weight: f64 },
    /// Additive Holt-Winters: level, trend damped by `phi` per step, daily and weekly seasons.
    HoltWinters { alpha: f64, beta: f64, phi: f64, gamma_day: f64, gamma_week: f64 },
    /// `day_weight` x (one day earlier) + the rest x (one week earlier), plus the residual smoothed with `alpha`,
    /// faded by `phi` per step of horizon.
    Blend { day_weight: f64, alpha: f64, phi: f64 },
}

impl Method {
    /// Returns the method's stable name.
    pub fn name(&self) -> &'static str {
        match self {
            Method::Persistence => "persistence",
            Method::SeasonalNaive => "seasonal_naive",
            Method::Anchored { .. } => "anchored",
            Method::HoltWinters { .. } => "holt_winters",
            Method::Blend { .. } => "blend",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Method::Persistence => write!(f, "persistence"),
            Method::SeasonalNaive => write!(f, "seasonal_naive"),
            Method::Anchored { share, day_weight } => write!(f, "anchored(share={share}, day_weight={day_weight})"),
            Method::HoltWinters { alpha, beta, phi, gamma_day, gamma_week } => {
                write!(
                    f,
                    "holt_winters(alpha={alpha}, beta={beta}, phi={phi}, gamma_day={gamma_day}, gamma_week={gamma_week})"
                )
            }
            Method::Blend { day_weight, alpha, phi } => {
                write!(f, "blend(day_weight={day_weight}, alpha={alpha}, phi={phi})")
            }
        }
    }
}

/// A method's error on the validation slice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub method: Method,
    pub rmse: f64,
    /// Percent; `None` when every actual in the slice is zero.
    pub mape: Option<f64>,
}

/// A forecaster's state after the history it has seen.
#[derive(Debug, Clone)]
pub struct Model {
    method: Method,
    step_s: f64,
    day: usize,
    week: usize,
    seen: usize,
    /// The last week of values (what the seasonal lags read).
    recent: VecDeque<f64>,
    level: f64,
    trend: f64,
    day_season: Vec<f64>,
    week_season: Vec<f64>,
    residual: f64,
    validation: Vec<Candidate>,
}

/// Returns how many steps of `step_s` make a day, if they divide it into at least 2 whole steps.
pub fn steps_per_day(step_s: f64) -> Result<usize, ForecastError> {
    let n = (DAY_S / step_s).round();
    if !step_s.is_finite() || step_s <= 0.0 || !n.is_finite() || n < 2.0 || (n * step_s - DAY_S).abs() > 1e-6 * DAY_S {
        return Err(ForecastError::BadStep { step_s });
    }
    Ok(n as usize)
}

/// Checks a history and returns the steps per day: at least one day of finite values.
fn check(history: &[f64], step_s: f64) -> Result<usize, ForecastError> {
    let day = steps_per_day(step_s)?;
    if history.len() < day {
        return Err(ForecastError::TooShort { have: history.len(), need: day, step_s });
    }
    match history.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(ForecastError::NonFinite { index, value: history[index] }),
        None => Ok(day),
    }
}

impl Model {
    /// Returns a model of `method` that has seen `history` (at least one day of finite values at `step_s`).
    /// Holt-Winters starts from the first day: its mean as the level, its shape as the daily season, no trend and
    /// a flat weekly season; the rest of the history updates that state.
    pub fn new(method: Method, history: &[f64], step_s: f64) -> Result<Model, ForecastError> {
        let day = check(history, step_s)?;
        let mut m = Model::start(method, &history[..day], step_s, day);
        history[day..].iter().for_each(|&y| m.observe(y));
        Ok(m)
    }

    /// Returns the model after its first day (`first_day.len()` = `day`, finite).
    fn start(method: Method, first_day: &[f64], step_s: f64, day: usize) -> Model {
        let week = day * DAYS_PER_WEEK;
        let level = first_day.iter().sum::<f64>() / day as f64;
        let hw = matches!(method, Method::HoltWinters { .. });
        Model {
            method,
            step_s,
            day,
            week,
            seen: day,
            recent: first_day.iter().copied().collect(),
            level,
            trend: 0.0,
            day_season: if hw { first_day.iter().map(|y| y - level).collect() } else { Vec::new() },
            week_season: if hw { vec![0.0; week] } else { Vec::new() },
            residual: 0.0,
            validation: Vec::new(),
        }
    }

    /// Returns the method this model forecasts with.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Returns the step between samples, in seconds.
    pub fn step_s(&self) -> f64 {
        self.step_s
    }

    /// Returns how many values the model has seen.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Returns the validation errors behind the choice of method (seasonal-naive, then the best of each other
    /// family); empty for a model built with [`Model::new`] or when the history was too short to validate.
    pub fn validation(&self) -> &[Candidate] {
        &self.validation
    }

    /// Updates the state with the next value. A non-finite value (a missed sample) is replaced by the model's own
    /// forecast of it, so one gap does not wreck the level.
    pub fn observe(&mut self, value: f64) {
        let y = if value.is_finite() { value } else { self.predict(1) };
        match self.method {
            Method::Persistence | Method::SeasonalNaive | Method::Anchored { .. } => {}
            Method::HoltWinters { alpha, beta, phi, gamma_day, gamma_week } => {
                let (pd, pw) = (self.seen % self.day, self.seen % self.week);
                let (d, w) = (self.day_season[pd], self.week_season[pw]);
                let prev = self.level;
                self.level = alpha * (y - d - w) + (1.0 - alpha) * (prev + phi * self.trend);
                self.trend = beta * (self.level - prev) + (1.0 - beta) * phi * self.trend;
                self.day_season[pd] = gamma_day * (y - self.level - w) + (1.0 - gamma_day) * d;
                self.week_season[pw] = gamma_week * (y - self.level - d) + (1.0 - gamma_week) * w;
            }
            Method::Blend { alpha, .. } => {
                let base = self.seasonal_base(1);
                self.residual = alpha * (y - base) + (1.0 - alpha) * self.residual;
            }
        }
        // A week and one value: the anchored method reads the value one week before the last.
        if self.recent.len() > self.week {
            self.recent.pop_front();
        }
        self.recent.push_back(y);
        self.seen += 1;
    }

    /// Returns the forecasts for the next `horizon_steps` steps, never below zero (demand is not negative).
    pub fn forecast(&self, horizon_steps: usize) -> Vec<f64> {
        (1..=horizon_steps).map(|h| self.predict(h)).collect()
    }

    /// Returns the forecast `h` (>= 1) steps after the last value seen, never below zero.
    fn predict(&self, h: usize) -> f64 {
        let y = match self.method {
            Method::Persistence => self.recent.back().copied().unwrap_or(0.0),
            Method::SeasonalNaive => self.lagged(h, if self.seen >= self.week { self.week } else { self.day }),
            Method::Anchored { share, day_weight } => {
                let change = |period: usize| self.lagged(h, period) - self.before_last(period);
                let seasonal = if self.seen > self.week {
                    day_weight * change(self.day) + (1.0 - day_weight) * change(self.week)
                } else {
                    change(self.day)
                };
                self.recent.back().copied().unwrap_or(0.0) + share * seasonal
            }
            Method::HoltWinters { phi, .. } => {
                let damped = if phi == 1.0 { h as f64 } else { phi * (1.0 - powi(phi, h)) / (1.0 - phi) };
                let t = self.seen + h - 1;
                self.level + damped * self.trend + self.day_season[t % self.day] + self.week_season[t % self.week]
            }
            Method::Blend { phi, .. } => self.seasonal_base(h) + powi(phi, h) * self.residual,
        };
        y.max(0.0)
    }

    /// Returns the blend's seasonal part `h` steps ahead: the day-lag value alone until a week has been seen.
    fn seasonal_base(&self, h: usize) -> f64 {
        let Method::Blend { day_weight, .. } = self.method else { return 0.0 };
        let day = self.lagged(h, self.day);
        if self.seen < self.week {
            return day;
        }
        day_weight * day + (1.0 - day_weight) * self.lagged(h, self.week)
    }

    /// Returns the value `period` steps before the last one seen (the last one while fewer have been seen).
    fn before_last(&self, period: usize) -> f64 {
        let n = self.recent.len();
        self.recent.get(n.wrapping_sub(1 + period)).or(self.recent.back()).copied().unwrap_or(0.0)
    }

    /// Returns the latest seen value a whole number of `period`s before the step `h` ahead.
    fn lagged(&self, h: usize, period: usize) -> f64 {
        let back = h.div_ceil(period) * period - h;
        let n = self.recent.len();
        // `back` < period <= what `recent` holds whenever a lag is read; the fallback only guards the index.
        self.recent.get(n.saturating_sub(1 + back)).or(self.recent.back()).copied().unwrap_or(0.0)
    }
}

/// Returns `x` to the power `n`, saturating the exponent.
fn powi(x: f64, n: usize) -> f64 {
    x.powi(i32::try_from(n).unwrap_or(i32::MAX))
}

/// Returns the model for forecasting `horizon_steps` ahead, fitted on all of `history`: persistence, unless a
/// candidate's RMSE on the validation slice (the last week of `history`, or less when the history is short: at
/// least two days stay before it to warm the state up) is lower than persistence's by more than
/// [`MUST_BEAT_PERSISTENCE_BY`]; then the best such candidate. Candidates are seasonal-naive and grids of anchored,
/// Holt-Winters and blend parameters, ranked by RMSE (in demand units: what over- and under-provisioning cost; MAPE
/// blows up near idle stretches); a tie keeps the earlier candidate. With too little history to validate,
/// persistence is chosen. [`Model::validation`] lists persistence, seasonal-naive and the best of each family.
pub fn fit_for_horizon(history: &[f64], step_s: f64, horizon_steps: usize) -> Result<Model, ForecastError> {
    let day = check(history, step_s)?;
    let h = horizon_steps.max(1);
    let val_len = (day * DAYS_PER_WEEK).min(history.len().saturating_sub(2 * day));
    if val_len <= h {
        return Model::new(Method::Persistence, history, step_s);
    }
    let val_start = history.len() - val_len;
    let score = |method| validate(method, history, step_s, day, val_start, h);
    let floor = score(Method::Persistence);
    let mut families = vec![floor, score(Method::SeasonalNaive)];
    for family in [anchored_grid(), holt_winters_grid(), blend_grid()] {
        let best = family.into_iter().map(score).reduce(|a, b| if b.rmse < a.rmse { b } else { a });
        families.extend(best);
    }
    let bar = floor.rmse * (1.0 - MUST_BEAT_PERSISTENCE_BY);
    let best = families[1..].iter().copied().reduce(|a, b| if b.rmse < a.rmse { b } else { a });
    let chosen = best.filter(|c| c.rmse < bar).unwrap_or(floor);
    let mut model = Model::new(chosen.method, history, step_s)?;
    model.validation = families;
    Ok(model)
}

/// Returns [`fit_for_horizon`] for one step ahead.
pub fn fit(history: &[f64], step_s: f64) -> Result<Model, ForecastError> {
    fit_for_horizon(history, step_s, 1)
}

fn anchored_grid() -> Vec<Method> {
    let mut grid = Vec::new();
    for share in ANCHOR_SHARES {
        for day_weight in ANCHOR_DAY_WEIGHTS {
            grid.push(Method::Anchored { share, day_weight });
        }
    }
    grid
}

fn holt_winters_grid() -> Vec<Method> {
    let mut grid = Vec::new();
    for alpha in HW_ALPHAS {
        for (beta, phi) in HW_TRENDS {
            for gamma_day in HW_GAMMAS {
                for gamma_week in HW_GAMMAS {
                    grid.push(Method::HoltWinters { alpha, beta, phi, gamma_day, gamma_week });
                }
            }
        }
    }
    grid
}

fn blend_grid() -> Vec<Method> {
    let mut grid = Vec::new();
    for day_weight in BLEND_DAY_WEIGHTS {
        for alpha in BLEND_ALPHAS {
            for phi in BLEND_PHIS {
                grid.push(Method::Blend { day_weight, alpha, phi });
            }
        }
    }
    grid
}

/// Returns `method`'s errors on `history[val_start..]`, each value forecast `h` steps ahead from the values before.
/// `history` is checked; `val_start - h + 1 >= day`.
fn validate(method: Method, history: &[f64], step_s: f64, day: usize, val_start: usize, h: usize) -> Candidate {
    let mut m = Model::start(method, &history[..day], step_s, day);
    let (mut actual, mut predicted) = (Vec::new(), Vec::new());
    for i in day..history.len() {
        if i + h > val_start && i + h <= history.len() {
            actual.push(history[i + h - 1]);
            predicted.push(m.predict(h));
        }
        m.observe(history[i]);
    }
    Candidate { method, rmse: rmse(&actual, &predicted).unwrap_or(f64::INFINITY), mape: mape(&actual, &predicted) }
}

/// Returns the forecasts of `series[start..]`, each made `horizon_steps` ahead by a model of `method` that has seen
/// only the values before it (a rolling-origin evaluation; the state updates incrementally, nothing is refitted).
/// Needs one day of values before the first forecast origin.
pub fn rolling(
    method: Method,
    series: &[f64],
    step_s: f64,
    start: usize,
    horizon_steps: usize,
) -> Result<Vec<f64>, ForecastError> {
    let h = horizon_steps.max(1);
    let known = (start + 1).saturating_sub(h);
    let mut m = Model::new(method, &series[..known.min(series.len())], step_s)?;
    let mut out = Vec::with_capacity(series.len().saturating_sub(start));
    for target in start..series.len() {
        out.push(m.predict(h));
        m.observe(series[target + 1 - h]);
    }
    Ok(out)
}

/// Returns the mean of each whole bucket of `bucket_s` (a multiple of `step_s`); a partial bucket at the end is
/// dropped.
pub fn aggregate(values: &[f64], step_s: f64, bucket_s: f64) -> Result<Vec<f64>, ForecastError> {
    let k = (bucket_s / step_s).round();
    if !step_s.is_finite()
        || step_s <= 0.0
        || !k.is_finite()
        || k < 1.0
        || (k * step_s - bucket_s).abs() > 1e-9 * bucket_s
    {
        return Err(ForecastError::BadBucket { bucket_s, step_s });
    }
    let k = k as usize;
    Ok(values.chunks_exact(k).map(|c| c.iter().sum::<f64>() / k as f64).collect())
}

/// Returns the mean absolute percentage error in percent over the pairs whose actual is not zero: a zero actual
/// (an idle cluster) has no percentage error, so those pairs are skipped. `None` when no actual is non-zero.
pub fn mape(actual: &[f64], forecast: &[f64]) -> Option<f64> {
    let terms: Vec<f64> =
        actual.iter().zip(forecast).filter(|(a, _)| **a != 0.0).map(|(a, f)| ((a - f) / a).abs()).collect();
    (!terms.is_empty()).then(|| 100.0 * terms.iter().sum::<f64>() / terms.len() as f64)
}

/// Returns the root-mean-square error over the pairs; `None` when there are none.
pub fn rmse(actual: &[f64], forecast: &[f64]) -> Option<f64> {
    let n = actual.len().min(forecast.len());
    (n > 0).then(|| (actual.iter().zip(forecast).map(|(a, f)| (a - f) * (a - f)).sum::<f64>() / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_S: f64 = 3600.0;

    /// A tiny linear congruential generator (Knuth's MMIX constants): fixed-seed noise without the rand crate.
    struct Lcg(u64);

    impl Lcg {
        /// Returns a uniform value in [0, 1).
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        /// Returns roughly normal noise with standard deviation `sd` (a sum of four uniforms).
        fn noise(&mut self, sd: f64) -> f64 {
            let s: f64 = (0..4).map(|_| self.uniform()).sum();
            (s - 2.0) * sd * 3f64.sqrt()
        }
    }

    /// Returns `weeks` of hourly demand: level 100, trend +0.05/h, a daily cycle, quiet weekends, noise sd 5.
    fn synthetic(weeks: usize, seed: u64) -> Vec<f64> {
        let mut rng = Lcg(seed);
        (0..weeks * 168)
            .map(|t| {
                let (hour, weekday) = (t % 24, (t / 24) % 7);
                let daily = 30.0 * (std::f64::consts::TAU * hour as f64 / 24.0).sin();
                let weekend = if weekday >= 5 { -40.0 } else { 0.0 };
                (100.0 + 0.05 * t as f64 + daily + weekend + rng.noise(5.0)).max(0.0)
            })
            .collect()
    }

    #[test]
    fn the_forecaster_beats_seasonal_naive_on_a_seasonal_trending_noisy_series() {
        for (seed, horizon) in [(1, 1), (2, 1), (3, 6)] {
            let series = synthetic(6, seed);
            let test_start = series.len() - 168;
            let model = fit_for_horizon(&series[..test_start], HOUR_S, horizon).unwrap();
            assert_ne!(model.method(), Method::SeasonalNaive, "seed {seed}");
            let chosen = rolling(model.method(), &series, HOUR_S, test_start, horizon).unwrap();
            let naive = rolling(Method::SeasonalNaive, &series, HOUR_S, test_start, horizon).unwrap();
            let last = rolling(Method::Persistence, &series, HOUR_S, test_start, horizon).unwrap();
            let actual = &series[test_start..];
            let (c, n) = (rmse(actual, &chosen).unwrap(), rmse(actual, &naive).unwrap());
            assert!(c < 0.85 * n, "seed {seed} h {horizon}: {} rmse {c:.2} vs seasonal-naive {n:.2}", model.method());
            let p = rmse(actual, &last).unwrap();
            assert!(c < p, "seed {seed} h {horizon}: {} rmse {c:.2} vs persistence {p:.2}", model.method());
            assert!(mape(actual, &chosen).unwrap() < mape(actual, &naive).unwrap(), "seed {seed}: mape");
        }
    }

    #[test]
    fn fitting_is_deterministic() {
        let series = synthetic(4, 7);
        let (a, b) = (fit(&series, HOUR_S).unwrap(), fit(&series, HOUR_S).unwrap());
        assert_eq!(a.method(), b.method());
        assert_eq!(a.validation(), b.validation());
        let names: Vec<&str> = a.validation().iter().map(|c| c.method.name()).collect();
        assert_eq!(names, ["persistence", "seasonal_naive", "anchored", "holt_winters", "blend"]);
    }

    #[test]
    fn observing_values_one_by_one_matches_a_model_built_on_them() {
        let series = synthetic(3, 3);
        let methods = [
            Method::Persistence,
            Method::Anchored { share: 0.5, day_weight: 0.5 },
            Method::SeasonalNaive,
            Method::HoltWinters { alpha: 0.3, beta: 0.01, phi: 0.98, gamma_day: 0.1, gamma_week: 0.05 },
            Method::Blend { day_weight: 0.5, alpha: 0.5, phi: 0.9 },
        ];
        for method in methods {
            let mut m = Model::new(method, &series[..100], HOUR_S).unwrap();
            series[100..].iter().for_each(|&y| m.observe(y));
            let whole = Model::new(method, &series, HOUR_S).unwrap();
            assert_eq!((m.seen(), m.forecast(30)), (whole.seen(), whole.forecast(30)), "{method}");
        }
    }

    #[test]
    fn seasonal_naive_repeats_last_week_and_falls_back_to_last_day() {
        // Hourly values numbered by their index, so a forecast names the index it copied.
        let days = |d: usize| (0..d * 24).map(|i| i as f64).collect::<Vec<f64>>();
        let cases = [
            ("a week of history: the value one week earlier", days(8), 1, 192.0 - 168.0),
            ("a week of history, 30 h ahead", days(8), 30, 192.0 + 29.0 - 168.0),
            ("less than a week: the value one day earlier", days(3), 1, 72.0 - 24.0),
            ("less than a week, 30 h ahead: two days earlier", days(3), 30, 72.0 + 29.0 - 48.0),
        ];
        for (rule, history, h, want) in cases {
            let m = Model::new(Method::SeasonalNaive, &history, HOUR_S).unwrap();
            assert_eq!(m.forecast(h)[h - 1], want, "{rule}");
        }
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        let cases: [(&str, Vec<f64>, f64, &str); 4] = [
            (
                "less than one day of history",
                vec![1.0; 23],
                HOUR_S,
                "need at least one day of history (24 steps of 3600 s), have 23",
            ),
            ("a step that does not divide a day", vec![1.0; 100], 7000.0, "step 7000 s must be > 0"),
            ("a zero step", vec![1.0; 100], 0.0, "step 0 s must be > 0"),
            ("a NaN in the history", [vec![1.0; 30], vec![f64::NAN]].concat(), HOUR_S, "history value 30 is NaN"),
        ];
        for (rule, history, step_s, want) in cases {
            let err = fit(&history, step_s).expect_err(rule).to_string();
            assert!(err.starts_with(want), "{rule}: {err}");
        }
        assert!(rolling(Method::SeasonalNaive, &[1.0; 48], HOUR_S, 30, 8).is_err(), "first origin less than a day in");
    }

    #[test]
    fn a_short_history_falls_back_to_persistence() {
        let m = fit(&synthetic(1, 1)[..48], HOUR_S).unwrap();
        assert_eq!((m.method(), m.validation().len()), (Method::Persistence, 0));
        assert_eq!(m.forecast(3), vec![synthetic(1, 1)[47]; 3], "the last value, at every step ahead");
    }

    /// A random walk (each hour the last value plus noise) has no pattern to find: persistence is chosen, and
    /// nothing chosen on it forecasts worse than persistence the week after.
    #[test]
    fn a_random_walk_keeps_persistence() {
        for seed in 1..=5 {
            let mut rng = Lcg(seed);
            let mut y = 200.0;
            let series: Vec<f64> = (0..6 * 168)
                .map(|_| {
                    y = (y + rng.noise(6.0)).max(0.0);
                    y
                })
                .collect();
            let test_start = series.len() - 168;
            for h in [1, 3, 6] {
                let model = fit_for_horizon(&series[..test_start], HOUR_S, h).unwrap();
                assert_eq!(model.method(), Method::Persistence, "seed {seed} h {h}: {:?}", model.validation());
            }
        }
    }

    #[test]
    fn anchored_adds_a_share_of_last_periods_change_to_the_last_value() {
        // Hourly values numbered by their index plus a bump at each day's hour 5: the change over the next 2 h a
        // day earlier was +1 +1 (index) then the bump's +10.
        let series: Vec<f64> = (0..72).map(|i| i as f64 + if i % 24 == 5 { 10.0 } else { 0.0 }).collect();
        let m = Model::new(Method::Anchored { share: 0.5, day_weight: 1.0 }, &series[..52], HOUR_S).unwrap();
        // Last value 51 (hour 3); a day earlier hour 3 -> hour 5 went from 27 to 39: +12, half of it is +6.
        assert_eq!(m.forecast(2)[1], 51.0 + 6.0);
    }

    #[test]
    fn errors_and_buckets() {
        assert_eq!(mape(&[0.0, 10.0, 20.0], &[5.0, 11.0, 18.0]), Some(10.0), "zero actuals are skipped");
        assert_eq!(mape(&[0.0, 0.0], &[1.0, 2.0]), None, "no non-zero actual: no MAPE");
        assert_eq!(rmse(&[1.0, 3.0], &[4.0, -1.0]), Some((12.5f64).sqrt()));
        assert_eq!(rmse(&[], &[]), None);
        assert_eq!(
            aggregate(&[1.0, 3.0, 5.0, 7.0, 9.0], 60.0, 120.0),
            Ok(vec![2.0, 6.0]),
            "a partial bucket is dropped"
        );
        assert!(aggregate(&[1.0], 60.0, 90.0).is_err(), "a bucket of 1.5 steps");
        let m = Model::new(Method::Blend { day_weight: 1.0, alpha: 1.0, phi: 1.0 }, &[0.0; 24], HOUR_S).unwrap();
        assert!(m.forecast(3).iter().all(|&y| y >= 0.0));
    }
}
