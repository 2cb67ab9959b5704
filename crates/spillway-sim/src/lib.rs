//! Spillway's simulator shell: replays job traces through the same engine the daemon runs, on a virtual clock,
//! beside reference policies and the instant-overflow bound.
//!
//! ```text
//! trace file ──loader──> TraceJob ──input──> SimJob ──┐
//! config ─────────────────────────────────────────────┼─> sim (event heap + simulated cloud + Engine) ─> SimOutcome
//!                                  policies (rewritten configs, bound) ─┘            run ─> Report, CSV, JSONL, HTML
//! ```

pub mod demand;
pub mod html;
pub mod input;
pub mod policies;
pub mod report;
pub mod run;
pub mod sim;
pub mod spot;
pub mod trace;
