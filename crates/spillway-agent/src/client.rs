//! The agent's one HTTP call: `POST /v1/agent/heartbeat`.

use spillway_api::{Heartbeat, HeartbeatReply};
use std::time::Duration;

/// How one heartbeat went, as the loop needs to tell it apart.
#[derive(Debug)]
pub enum Outcome {
    /// 2xx with a reply we could read.
    Reply(HeartbeatReply),
    /// 410: the daemon terminated this node.
    Gone,
    /// 401 or 403: the token was refused (a restarting daemon may not have reloaded it yet).
    Denied(u16, String),
    /// Any other answer: another status, or a 2xx whose body is not a reply.
    Failed(String),
    /// No answer at all: connection refused, DNS, timeout.
    Unreachable(String),
}

/// A heartbeat client for one daemon and one node token.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    url: String,
    auth: String,
}

impl Client {
    /// A client for the daemon at `server` (`http://host:port`, a trailing `/` is fine).
    pub fn new(server: &str, token: &str) -> Self {
        let config = ureq::Agent::config_builder()
            // Statuses are outcomes we act on, not errors.
            .http_status_as_error(false)
            // Bounded so a hung daemon counts as unreachable instead of stalling heartbeats forever.
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        Client {
            agent: ureq::Agent::new_with_config(config),
            url: format!("{}/v1/agent/heartbeat", server.trim_end_matches('/')),
            auth: format!("Bearer {token}"),
        }
    }

    /// Sends one heartbeat and classifies the answer.
    pub fn heartbeat(&self, hb: &Heartbeat) -> Outcome {
        let resp = self.agent.post(&self.url).header("Authorization", &self.auth).send_json(hb);
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => return Outcome::Unreachable(format!("POST {}: {e}", self.url)),
        };
        let status = resp.status().as_u16();
        let body = match resp.body_mut().read_to_string() {
            Ok(b) => b,
            Err(e) => {
                return Outcome::Unreachable(format!("reading reply of POST {} (status {status}): {e}", self.url));
            }
        };
        match status {
            200..=299 => match serde_json::from_str::<HeartbeatReply>(&body) {
                Ok(reply) => Outcome::Reply(reply),
                Err(e) => Outcome::Failed(format!("bad heartbeat reply from {}: {e}", self.url)),
            },
            410 => Outcome::Gone,
            401 | 403 => Outcome::Denied(status, short(&body)),
            _ => Outcome::Failed(format!("POST {} answered {status}: {}", self.url, short(&body))),
        }
    }
}

/// The first line of an error body, cut to fit a log line.
fn short(body: &str) -> String {
    let line = body.lines().next().unwrap_or("");
    line.chars().take(200).collect()
}
