//! One colour per pool, market, team and tier for the whole page, decided once before any chart is drawn, so the
//! same name has the same colour in every chart it appears in.

use super::svg::PALETTE;
use crate::report::{Report, TimeSeries};
use std::collections::{BTreeMap, BTreeSet};

/// Tiers, in name order (p0, p1, p2 first for the usual names).
const TIER_COLORS: [&str; 6] = ["#d55e00", "#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];
/// Teams, in name order (Tableau 10): a set apart from the tiers' so a team is not read as a tier.
const TEAM_COLORS: [&str; 10] =
    ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
/// Paid-for GPUs that ran no job.
pub const IDLE: &str = "#c4c9d0";
/// Totals and demand.
pub const INK: &str = "#1d2430";

/// The colours of the page.
#[derive(Debug, Clone, Default)]
pub struct Colors {
    pools: BTreeMap<String, String>,
    teams: BTreeMap<String, String>,
    tiers: BTreeMap<String, String>,
}

impl Colors {
    /// Returns the colours of every pool, team and tier named in the report or in any of `series`.
    pub fn new<'a>(report: &Report, series: impl IntoIterator<Item = &'a TimeSeries>) -> Colors {
        let mut pools: BTreeSet<String> = report.input.pool_markets.keys().cloned().collect();
        for s in series {
            pools.extend(super::time::pools(s));
        }
        let mut used: BTreeSet<&str> = BTreeSet::new();
        let mut spare = PALETTE[3..].iter().copied().map(String::from).chain((0..).map(generated));
        let mut pool_colors = BTreeMap::new();
        for pool in pools {
            // A pool takes its market's colour (as in the cost chart); a second pool of a market, a spare one.
            let color = match report.input.pool_markets.get(&pool).and_then(|m| market(m)) {
                Some(c) if used.insert(c) => c.to_string(),
                _ => spare.next().unwrap_or_else(|| generated(0)),
            };
            pool_colors.insert(pool, color);
        }
        let teams: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.cost_by_team.keys()).collect();
        let tiers: BTreeSet<&String> =
            report.runs.iter().flat_map(|r| r.cost_by_tier.keys().chain(r.tiers.keys())).collect();
        Colors { pools: pool_colors, teams: assign(teams, &TEAM_COLORS), tiers: assign(tiers, &TIER_COLORS) }
    }

    /// Returns the colour of a pool (grey for a pool no input named).
    pub fn pool(&self, name: &str) -> &str {
        self.pools.get(name).map_or("#555555", String::as_str)
    }

    /// Returns the colour of a team (grey for a team no run named).
    pub fn team(&self, name: &str) -> &str {
        self.teams.get(name).map_or("#555555", String::as_str)
    }

    /// Returns the colour of a tier; a tier no run named (one only `waits_by_tier` has) gets one from its name.
    pub fn tier(&self, name: &str) -> String {
        match self.tiers.get(name) {
            Some(c) => c.clone(),
            None => generated(name.bytes().map(usize::from).sum()),
        }
    }
}

/// Returns the colour of a market (`fixed`, `on_demand`, `spot`) in every chart, `None` for another name.
pub fn market(market: &str) -> Option<&'static str> {
    match market {
        "fixed" => Some(PALETTE[0]),
        "on_demand" => Some(PALETTE[1]),
        "spot" => Some(PALETTE[2]),
        _ => None,
    }
}

/// Returns `names` (in order) paired with `palette`'s colours, then generated ones when the palette runs out.
fn assign<'a>(names: impl IntoIterator<Item = &'a String>, palette: &[&str]) -> BTreeMap<String, String> {
    let mut colors = palette.iter().copied().map(String::from).chain((0..).map(generated));
    names.into_iter().map(|n| (n.clone(), colors.next().unwrap_or_else(|| generated(0)))).collect()
}

/// Returns the `i`th colour beyond a palette: hues a golden angle apart, so neighbours differ.
fn generated(i: usize) -> String {
    let hue = (i as f64 * 137.508 + 20.0) % 360.0;
    format!("hsl({hue:.0},55%,45%)")
}
