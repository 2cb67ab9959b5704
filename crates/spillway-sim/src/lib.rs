//! Spillway's simulator shell: replays job traces through the same engine the daemon runs, on a virtual clock,
//! beside reference policies and the instant-overflow bound.
//!
//! ```text
//! trace file ──loader──> TraceJob ──input──> SimJob ──┐
//! config ─────────────────────────────────────────────┼─> sim (event heap + simulated cloud + Engine) ─> SimOutcome
//!                                  policies (rewritten configs, bound) ─┘            run ─> Report, CSV, JSONL, HTML
//! ```

pub mod capped_bound;
pub mod demand;
pub mod elastic_cmp;
pub mod html;
pub mod input;
pub mod policies;
pub mod price;
pub mod report;
pub mod run;
pub mod sim;
pub mod spot;
pub mod sweep;
pub mod trace;

/// Returns `../shared/<rel>` (the data beside the project) when it exists. When it does not, a test skips: this
/// prints why and returns `None`, unless `SPILLWAY_REQUIRE_SHARED=1` is set (CI, where the data must be present):
/// then a missing file is a failure and this panics naming it.
pub fn shared(rel: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared").join(rel);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("SPILLWAY_REQUIRE_SHARED=1 but ../shared/{rel} is missing ({})", path.display());
    }
    println!("skipping: ../shared/{rel} not found");
    None
}
