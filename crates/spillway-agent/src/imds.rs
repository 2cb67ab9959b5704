//! The EC2 instance metadata service, polled for what AWS tells the instance before it tells anyone else: a
//! spot interruption (`spot/instance-action`) or a rebalance recommendation (`events/recommendations/rebalance`).
//! IMDSv2: a session token from `PUT /latest/api/token`, sent with every read. Runs on its own thread; the
//! heartbeat carries what it saw to the daemon, which acts once per node (the SQS event may come first).

use spillway_api::NodeNotice;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the service is read (AWS updates `instance-action` about every 5 s).
const POLL: Duration = Duration::from_secs(5);
/// Lifetime asked for the session token.
const TOKEN_TTL_S: &str = "21600";

/// The notices seen so far, shared with the heartbeat loop.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<NodeNotice>>>);

impl Seen {
    /// Returns what was seen so far (sent with every heartbeat: the daemon ignores repeats).
    pub fn get(&self) -> Vec<NodeNotice> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn add(&self, n: NodeNotice) {
        if let Ok(mut v) = self.0.lock()
            && !v.iter().any(|x| std::mem::discriminant(x) == std::mem::discriminant(&n))
        {
            v.push(n);
        }
    }
}

/// Starts polling the metadata service at `base` (`http://169.254.169.254`); returns what it sees. The service
/// being absent (not on EC2) only means nothing is ever seen.
pub fn watch(base: &str, node: u32) -> Seen {
    let seen = Seen::default();
    let (out, base) = (seen.clone(), base.trim_end_matches('/').to_string());
    let spawned = std::thread::Builder::new().name("spillway-imds".into()).spawn(move || {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(2)))
                .build(),
        );
        loop {
            for n in poll(&agent, &base) {
                eprintln!("agent node {node}: the instance metadata service says {n:?}");
                out.add(n);
            }
            std::thread::sleep(POLL);
        }
    });
    if let Err(e) = spawned {
        eprintln!("agent node {node}: cannot watch the instance metadata service: {e}");
    }
    seen
}

/// Reads the service once; returns the notices it holds now.
fn poll(agent: &ureq::Agent, base: &str) -> Vec<NodeNotice> {
    let token = agent
        .put(format!("{base}/latest/api/token"))
        .header("X-aws-ec2-metadata-token-ttl-seconds", TOKEN_TTL_S)
        .send_empty()
        .ok()
        .filter(|r| r.status().is_success())
        .and_then(|mut r| r.body_mut().read_to_string().ok());
    let Some(token) = token else { return Vec::new() };
    let read = |path: &str| {
        let mut r = agent
            .get(format!("{base}/latest/meta-data/{path}"))
            .header("X-aws-ec2-metadata-token", &token)
            .call()
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        let body = r.body_mut().read_to_string().ok()?;
        serde_json::from_str::<serde_json::Value>(&body).ok()
    };
    let mut found = Vec::new();
    if let Some(action) = read("spot/instance-action") {
        let deadline_ms = action.get("time").and_then(|t| t.as_str()).and_then(rfc3339_utc_ms);
        found.push(NodeNotice::Interruption { deadline_ms });
    }
    if read("events/recommendations/rebalance").is_some() {
        found.push(NodeNotice::Rebalance);
    }
    found
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (what IMDS writes) into ms since the epoch.
fn rfc3339_utc_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imds_times_parse_to_epoch_ms() {
        assert_eq!(rfc3339_utc_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_utc_ms("2026-12-01T17:45:13Z"), Some(1_796_147_113_000));
        assert_eq!(rfc3339_utc_ms("2000-02-29T12:00:00Z"), Some(951_825_600_000));
        for bad in
            ["", "2026-12-01 17:45:13Z", "2026-13-01T00:00:00Z", "2026-12-01T17:45:13+01:00", "yyyy-12-01T00:00:00Z"]
        {
            assert_eq!(rfc3339_utc_ms(bad), None, "{bad:?}");
        }
    }
}
