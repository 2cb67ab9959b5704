//! The Spillway node agent: registers with the daemon by heartbeating, runs the workers the daemon assigns as
//! process groups under the job contract, stops them on order, and reports exits, checkpoints and GPU
//! utilization. The agent pulls; the daemon never connects to it.
//!
//! Modules: [`agent`] (the heartbeat loop and when to give up), [`client`] (the HTTP call), [`runner`] (the
//! processes), [`spawn`] (the job contract), [`history`] (no worker starts twice), [`escaped`] (processes that left a worker's group), [`user`] (`--run-as`), [`gpus`]
//! (virtual GPU bookkeeping), [`checkpoint`], [`signals`], [`nvml`].

// The agent is an imperative shell around processes and the network: heartbeat periods, stop graces and
// checkpoint times need the real clock. The workspace's clock ban is for the functional core.
#![allow(clippy::disallowed_methods)]

pub mod agent;
pub mod checkpoint;
pub mod client;
pub mod escaped;
pub mod gpus;
pub mod history;
pub mod imds;
pub mod nvml;
pub mod runner;
pub mod signals;
pub mod spawn;
pub mod user;

pub use runner::{PollReport, Runner, SPAWN_FAILED_CODE, StartOutcome};

use anyhow::{Context, bail};
use std::io::BufRead;
use std::path::PathBuf;

/// How to run the agent (the `spillway agent` subcommand's flags).
#[derive(Debug, Clone)]
pub struct AgentArgs {
    /// The daemon's base URL, e.g. `http://127.0.0.1:7878`.
    pub server: String,
    pub node: u32,
    /// The node token, sent as `Authorization: Bearer <token>`. The CLI reads it from stdin ([`read_token`]):
    /// the command line and the environment of the agent are readable by its jobs.
    pub token: String,
    /// Virtual GPUs of this node: indices `0..gpus`.
    pub gpus: u32,
    /// Agent scratch space; relative checkpoint and log paths of assignments are taken under it.
    pub data_dir: PathBuf,
    /// Sleep this long before the first heartbeat (injected boot latency).
    pub boot_delay_s: f64,
    /// Heartbeat period in milliseconds (default 500).
    pub heartbeat_ms: u64,
    /// Run workers as this Unix user (`--run-as`); the agent must then be root, or it refuses to start.
    pub run_as: Option<String>,
    /// Poll the EC2 instance metadata service at this URL for spot notices (`--imds-url`); `None`: not on EC2.
    pub imds_url: Option<String>,
    /// The address other nodes reach this one at (`--advertise-addr`); `None`: the local address of its route to
    /// the daemon ([`route_addr`]).
    pub advertise_addr: Option<String>,
}

/// Returns the local IP address this machine would use to reach `server` (a URL such as `http://10.0.0.5:7878`):
/// the address other nodes on that network reach it at. Sends nothing (a UDP socket is only connected). `None`
/// when the URL has no host or it does not resolve.
pub fn route_addr(server: &str) -> Option<String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    let target = with_port.to_socket_addrs().ok()?.next()?;
    let socket = UdpSocket::bind(if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip().to_string())
}

/// Longest token line [`read_token`] accepts, so a stray stream cannot make the agent buffer without end.
const MAX_TOKEN_LINE: u64 = 4096;

/// Reads the node token from the first line of `input` (how the local provider hands it over: token, newline,
/// end of stream). Returns it without the line end; an empty or over-long line is an error.
pub fn read_token(input: impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    input.take(MAX_TOKEN_LINE + 1).read_line(&mut line).context("reading the node token from stdin")?;
    if line.len() as u64 > MAX_TOKEN_LINE {
        bail!("the node token on stdin is longer than {MAX_TOKEN_LINE} bytes");
    }
    let token = line.trim_end_matches(['\n', '\r']);
    if token.is_empty() {
        bail!("no node token on stdin (expected the token and a newline)");
    }
    Ok(token.to_string())
}

/// Runs the agent until the daemon answers 410 Gone (Ok), the agent gets SIGTERM or SIGINT (Ok, after stopping its
/// workers), or it gives up: the daemon unreachable for 600 s or refusing the token for 60 s (Err). Its workers are
/// dead whichever way it returns. With `run_as`, fails at once unless the agent is root and the user exists.
pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    agent::run_loop(&args, agent::Limits::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_the_first_line_of_stdin() {
        assert_eq!(read_token("s3cret\n".as_bytes()).unwrap(), "s3cret");
        assert_eq!(read_token("s3cret\r\nmore\n".as_bytes()).unwrap(), "s3cret");
        assert_eq!(read_token("no-newline".as_bytes()).unwrap(), "no-newline");
        assert!(read_token("".as_bytes()).is_err(), "closed stdin");
        assert!(read_token("\n".as_bytes()).is_err(), "empty line");
        let long = "x".repeat(5000);
        assert!(read_token(long.as_bytes()).is_err(), "over-long line");
    }

    #[test]
    fn the_route_to_a_loopback_daemon_is_the_loopback_address() {
        assert_eq!(route_addr("http://127.0.0.1:7878").as_deref(), Some("127.0.0.1"));
        assert_eq!(route_addr("http://user@127.0.0.1:7878/v1?x#y").as_deref(), Some("127.0.0.1"));
        assert_eq!(route_addr("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(route_addr("http://no such host:1"), None);
        assert_eq!(route_addr(""), None);
    }
}
