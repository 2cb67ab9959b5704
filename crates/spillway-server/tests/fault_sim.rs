//! The daemon's fault simulation (see `faultsim/mod.rs`). The tests run a subset of seeds; the ignored test runs
//! 1,000 and prints the count of violations (`cargo test --release -p spillway-server --test fault_sim -- --ignored
//! --nocapture`). A failing seed reproduces from its number: `SPILLWAY_FAULT_SEED=N`.

mod faultsim;

fn run(seeds: impl Iterator<Item = u64>) -> (u64, usize, Vec<String>) {
    let (mut runs, mut bad, mut first) = (0, 0, Vec::new());
    let (mut jobs, mut crashes) = (0u64, 0u64);
    for seed in seeds {
        let out = faultsim::run_seed(seed);
        runs += 1;
        jobs += u64::from(out.jobs);
        crashes += u64::from(out.crashes);
        if !out.violations.is_empty() {
            bad += out.violations.len();
            if first.len() < 10 {
                first.push(format!("seed {seed}: {}", out.violations.join("; ")));
            }
        }
    }
    println!("fault simulation: {runs} seeds, {jobs} jobs, {crashes} daemon crashes, {bad} invariant violations");
    (runs, bad, first)
}

#[test]
fn a_subset_of_seeds_keeps_every_invariant() {
    let seeds: Box<dyn Iterator<Item = u64>> =
        match std::env::var("SPILLWAY_FAULT_SEED").ok().and_then(|s| s.parse().ok()) {
            Some(s) => Box::new(std::iter::once(s)),
            None => Box::new(0..12),
        };
    let (_, bad, first) = run(seeds);
    assert_eq!(bad, 0, "{}", first.join("\n"));
}

#[test]
#[ignore = "1,000 seeds: run by hand, prints the count of violations"]
fn a_thousand_seeds() {
    let (_, bad, first) = run(0..1000);
    assert_eq!(bad, 0, "{}", first.join("\n"));
}
