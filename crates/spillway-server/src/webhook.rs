//! Budget alerts to a webhook (`[alerts] webhook`): each alert is POSTed as JSON, in the order the engine raised
//! them, by one sender thread; a failed POST (no answer, or not 2xx) is retried with backoff before the next alert
//! goes. The body has a `text` line too, so a chat webhook (Slack's, Mattermost's) shows it as it is.
//!
//! Alerts are raised when decided, not on replay, so a restart does not repeat them; one still queued when the
//! daemon stops is lost (the event log keeps it).

use spillway_core::{BudgetAlert, Time};
use std::sync::mpsc;
use std::time::Duration;

/// Waits before each retry of one alert.
const RETRIES: [Duration; 4] =
    [Duration::from_secs(1), Duration::from_secs(4), Duration::from_secs(15), Duration::from_secs(60)];

/// The queue of the sender thread.
pub struct Webhook {
    tx: mpsc::Sender<String>,
}

impl Webhook {
    /// Starts the sender thread for `url`.
    pub fn start(url: String) -> Webhook {
        let (tx, rx) = mpsc::channel::<String>();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        std::thread::spawn(move || {
            for body in rx {
                deliver(&agent, &url, &body);
            }
        });
        Webhook { tx }
    }

    /// Queues `body` (JSON) for delivery.
    pub fn send(&self, body: String) {
        // The thread only ends with the daemon.
        let _ = self.tx.send(body);
    }
}

/// POSTs `body` until a 2xx answer or the retries run out.
fn deliver(agent: &ureq::Agent, url: &str, body: &str) {
    for wait in std::iter::once(Duration::ZERO).chain(RETRIES) {
        std::thread::sleep(wait);
        let res = agent.post(url).header("Content-Type", "application/json").send(body);
        match res {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => eprintln!("spillway: alert webhook {url}: HTTP {}", r.status()),
            Err(e) => eprintln!("spillway: alert webhook {url}: {e}"),
        }
    }
    eprintln!("spillway: alert webhook {url}: gave up after {} tries: {body}", RETRIES.len() + 1);
}

/// Returns the JSON body of `alert`, raised at `at` in cluster `cluster`.
pub fn body(alert: &BudgetAlert, at: Time, cluster: &str) -> String {
    serde_json::json!({
        "kind": if alert.capping { "budget_cap" } else { "budget_alert" },
        "cluster": cluster,
        "at": at as f64 / 1000.0,
        "team": alert.team,
        "period": alert.period.as_str(),
        "share": alert.share,
        "percent": (alert.share * 100.0).round(),
        "spent_usd": alert.spent_usd,
        "limit_usd": alert.limit_usd,
        "capping": alert.capping,
        "text": format!("Spillway {cluster}: {}", alert.describe()),
    })
    .to_string()
}
