//! Team budgets: what each team has spent in its current UTC day or month, the alerts as that crosses the
//! budget's shares, and the hard cap that stops buying cloud capacity for a team's work once its budget is spent.
//!
//! Spend is the team's cost as the ledger books it (its jobs' share of the nodes they ran on, and the nodes another
//! scheduler asked for on its behalf), read at the instant of each pass. Between two changes of the cluster a team's
//! cost grows at a fixed rate, so the engine asks to be woken at the very instant the next share is crossed: an
//! alert and a cap come at the same time whatever else wakes the engine. A period's opening spend is read before
//! the first event after its start is applied (in `advance`), so it is exact too.

use crate::config::{Budget, Period};
use crate::event::{Action, BudgetAlert, DecisionKind};
use crate::state::{BudgetState, Engine, WakeAt};
use crate::time::Time;

/// One budget's standing, for the API, metrics and `explain`.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStatus {
    pub team: String,
    pub period: Period,
    pub period_start: Time,
    pub limit_usd: f64,
    pub spent_usd: f64,
    pub hard_cap: bool,
    /// The hard cap holds now: no cloud capacity is bought for the team's work.
    pub capping: bool,
}

impl Engine {
    /// Opens the period of each budget whose current one ended before `now`: its opening spend is the team's
    /// cost at the period's start, read from the books as they stand (nothing has changed since the last event).
    pub(crate) fn roll_budgets(&mut self, now: Time) {
        for i in 0..self.cfg.budgets.len() {
            let b = &self.cfg.budgets[i];
            let start = b.period.start(now);
            if self.budgets[i].period_start == Some(start) {
                continue;
            }
            let usd = self.team_usd(&b.team, start);
            self.budgets[i] = BudgetState { period_start: Some(start), start_usd: usd, alerted: 0, cap_raised: false };
        }
    }

    /// Returns `team`'s cost booked by `t` (the books at `t` of the cluster as it stands).
    fn team_usd(&self, team: &str, t: Time) -> f64 {
        let Some(&i) = self.c.team_index.get(team) else { return 0.0 };
        self.c.books_at(t).by_team.get(i).copied().unwrap_or(0.0)
    }

    /// Raises the alerts of every share crossed by now and sets which teams the hard cap holds (before the pass
    /// plans scale-out).
    pub(crate) fn track_budgets(&mut self) {
        if self.cfg.budgets.is_empty() {
            return;
        }
        self.roll_budgets(self.now);
        let books = self.c.books_at(self.now);
        self.capped = vec![false; self.c.teams.len()];
        for i in 0..self.cfg.budgets.len() {
            let b = self.cfg.budgets[i].clone();
            let Some(&team) = self.c.team_index.get(&b.team) else { continue };
            let spent = books.by_team.get(team).copied().unwrap_or(0.0) - self.budgets[i].start_usd;
            let capping = b.hard_cap && spent >= b.usd;
            while let Some(&share) = b.alert_at.get(self.budgets[i].alerted) {
                if spent < share * b.usd {
                    break;
                }
                self.budgets[i].alerted += 1;
                // The first share of 100% or more announces the cap, when one starts to hold.
                let announces = capping && share >= 1.0 && !self.budgets[i].cap_raised;
                self.budgets[i].cap_raised |= announces;
                self.alert(&b, share, spent, announces);
            }
            if capping && !self.budgets[i].cap_raised {
                // A cap starts to hold even where no share of 100% is listed: it is always announced.
                self.budgets[i].cap_raised = true;
                self.alert(&b, 1.0, spent, true);
            }
            if capping {
                self.capped[team] = true;
            }
        }
    }

    /// Asks to be woken at the end of each budget's period and when its next share is crossed at the team's rate
    /// as this pass leaves the cluster (after its starts, stops and launches).
    pub(crate) fn budget_wakes(&self, wake: &mut WakeAt) {
        if self.cfg.budgets.is_empty() {
            return;
        }
        let (books, rate) = (self.c.books_at(self.now), self.c.hourly_books());
        for (b, s) in self.cfg.budgets.iter().zip(&self.budgets) {
            wake.at(b.period.next(self.now));
            let Some(&team) = self.c.team_index.get(&b.team) else { continue };
            let spent = books.by_team.get(team).copied().unwrap_or(0.0) - s.start_usd;
            let per_hour = rate.by_team.get(team).copied().unwrap_or(0.0);
            if per_hour <= 0.0 {
                continue;
            }
            // The next share, and the cap where one is set and not yet holding.
            let next = b.alert_at.get(s.alerted).map(|share| share * b.usd);
            let cap = (b.hard_cap && !s.cap_raised).then_some(b.usd);
            for usd in [next, cap].into_iter().flatten().filter(|&usd| usd > spent) {
                let guess = ((usd - spent) / per_hour * 3_600_000.0).ceil().clamp(0.0, 1e15) as Time;
                wake.at(self.first_ms_at(team, s.start_usd, usd, self.now + guess));
            }
        }
    }

    /// Returns the first millisecond after now at which `team` has spent `usd` since its cost was `start_usd`
    /// (the test `track_budgets` makes), searched from `guess`: the books are read at each instant, so the answer
    /// does not depend on when it is asked, and an extra wake-up computes the same one.
    fn first_ms_at(&self, team: usize, start_usd: f64, usd: f64, guess: Time) -> Time {
        let cost = |t: Time| self.c.books_at(t).by_team.get(team).copied().unwrap_or(0.0) - start_usd;
        // Not crossed now (else its alert was raised this pass), so the answer is later than now.
        let mut t = guess.max(self.now + 1);
        // The guess is off by float rounding only: a few steps at most either way.
        for _ in 0..16 {
            if t > self.now + 1 && cost(t - 1) >= usd {
                t -= 1;
            } else if cost(t) < usd {
                t += 1;
            } else {
                break;
            }
        }
        t
    }

    /// Records a crossed share and hands the alert to the shell.
    fn alert(&mut self, b: &Budget, share: f64, spent: f64, capping: bool) {
        let a =
            BudgetAlert { team: b.team.clone(), period: b.period, share, spent_usd: spent, limit_usd: b.usd, capping };
        let reason = if capping { "budget_cap" } else { "budget_alert" };
        self.record(DecisionKind::Budget, || format!("team:{}", a.team), reason, || a.describe());
        self.actions.push_back(Action::BudgetAlert(a));
    }

    /// Returns whether the hard cap of one of `team`'s budgets holds (as of the last pass).
    pub(crate) fn team_capped(&self, team: usize) -> bool {
        self.capped.get(team).copied().unwrap_or(false)
    }

    /// Returns every budget's standing at `now` (spend read from the books at `now`).
    pub fn budget_status(&self, now: Time) -> Vec<BudgetStatus> {
        let books = self.c.books_at(now);
        self.cfg
            .budgets
            .iter()
            .zip(&self.budgets)
            .map(|(b, s)| {
                let period_start = b.period.start(now);
                let team = self.c.team_index.get(&b.team).copied();
                let usd = team.and_then(|t| books.by_team.get(t).copied()).unwrap_or(0.0);
                // A period the engine has not opened yet (no event since it began) starts from the books at its start.
                let start_usd = if s.period_start == Some(period_start) {
                    s.start_usd
                } else {
                    self.team_usd(&b.team, period_start)
                };
                let spent_usd = usd - start_usd;
                BudgetStatus {
                    team: b.team.clone(),
                    period: b.period,
                    period_start,
                    limit_usd: b.usd,
                    spent_usd,
                    hard_cap: b.hard_cap,
                    capping: b.hard_cap && spent_usd >= b.usd,
                }
            })
            .collect()
    }
}
