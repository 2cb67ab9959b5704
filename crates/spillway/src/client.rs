//! The HTTP client the CLI uses to talk to the daemon: where the server is ([`Conn`]: flags, environment or
//! `<data-dir>/client.json`), bearer-token requests, printing answers as tables or JSON, and the mapping of
//! failures onto exit codes ([`CliError`], [`EXIT_CODES_HELP`]).

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit code: any other error.
pub const EXIT_OTHER: u8 = 1;
/// Exit code: a usage error (clap's own, and a filter value the server refuses).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the resource does not exist (404).
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: unauthorized or forbidden (401/403).
pub const EXIT_AUTH: u8 = 4;
/// Exit code: the server rejected the request (400/409/413/422).
pub const EXIT_REJECTED: u8 = 5;
/// Exit code: the server cannot be reached.
pub const EXIT_UNREACHABLE: u8 = 6;

/// The largest response body the client reads (logs can be long).
const BODY_LIMIT: u64 = 1 << 30;
/// The time one request may take, connection and body included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// An error with the process exit code it should produce. `main` downcasts an `anyhow::Error` to it; any other
/// error exits with [`EXIT_OTHER`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        CliError { code, message: message.into() }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Returns the exit code for an HTTP error status: 3 for 404, 4 for 401/403, 5 for 400/409/413/422, else 1.
pub fn exit_code_for_status(status: u16) -> u8 {
    match status {
        404 => EXIT_NOT_FOUND,
        401 | 403 => EXIT_AUTH,
        400 | 409 | 413 | 422 => EXIT_REJECTED,
        _ => EXIT_OTHER,
    }
}

/// Returns the [`CliError`] for a non-2xx response: the exit code from [`exit_code_for_status`] and a message with
/// the server's `ErrorBody.error` and `field` (or the raw body when it is not an `ErrorBody`).
pub fn status_error(method: &str, path: &str, status: u16, body: &[u8]) -> CliError {
    let what = match serde_json::from_slice::<spillway_api::ErrorBody>(body) {
        Ok(e) => match e.field {
            Some(field) => format!("{} (field `{field}`)", e.error),
            None => e.error,
        },
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() { "no details".to_string() } else { text.chars().take(500).collect() }
        }
    };
    let kind = match exit_code_for_status(status) {
        EXIT_NOT_FOUND => "not found",
        EXIT_AUTH if status == 401 => "unauthorized",
        EXIT_AUTH => "forbidden",
        EXIT_REJECTED => "rejected",
        _ => "server error",
    };
    // A query the server refuses (an unknown tier, team or pool in a filter) is a usage error, as clap's own are.
    let code = if method == "GET" && matches!(status, 400 | 422) { EXIT_USAGE } else { exit_code_for_status(status) };
    CliError::new(code, format!("{kind} ({status}) on {method} {path}: {what}"))
}

/// Returns the [`CliError`] for a transport failure: exit 6 (naming the URL) when the server cannot be reached or
/// does not answer in time, else 1.
fn transport_error(server: &str, method: &str, path: &str, e: ureq::Error) -> CliError {
    let unreachable = matches!(
        e,
        ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Timeout(_)
    );
    if unreachable {
        CliError::new(EXIT_UNREACHABLE, format!("cannot reach the server at {server}: {e}"))
    } else {
        CliError::new(EXIT_OTHER, format!("{method} {server}{path}: {e}"))
    }
}

/// The exit codes, for the top-level `--help`.
pub const EXIT_CODES_HELP: &str = "Exit codes of the commands that talk to the daemon:\n  \
    0  success\n  1  other error\n  2  usage error (also a filter value the server does not know)\n  3  not found (404)\n  \
    4  unauthorized or forbidden (401/403)\n  5  request rejected (400/409/413/422; the server's error and field are printed)\n  \
    6  cannot reach the server";

/// Where the daemon is and how to print; shared by every command below.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// Daemon URL, e.g. http://127.0.0.1:7878 (default: from <data-dir>/client.json).
    #[arg(long, env = "SPILLWAY_SERVER", global = true)]
    pub server: Option<String>,
    /// Bearer token (default: from <data-dir>/client.json).
    #[arg(long, env = "SPILLWAY_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Directory holding client.json (written by `spillway up`).
    #[arg(long, env = "SPILLWAY_DATA_DIR", default_value = ".spillway", global = true)]
    pub data_dir: PathBuf,
    /// Output: human tables, or the server's JSON (pretty) for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

impl Default for Conn {
    fn default() -> Self {
        Conn { server: None, token: None, data_dir: PathBuf::from(".spillway"), output: Output::Table }
    }
}

/// Returns a client for the server named by `conn` (or client.json).
pub fn connect(conn: &Conn) -> anyhow::Result<Client> {
    let (server, token) = crate::client::resolve(conn.server.clone(), conn.token.clone(), &conn.data_dir)?;
    Ok(Client::new(&server, token))
}

/// Returns the query pairs whose value is present.
pub fn query<'a>(pairs: &[(&'a str, Option<String>)]) -> Vec<(&'a str, String)> {
    pairs.iter().filter_map(|(k, v)| v.clone().map(|v| (*k, v))).collect()
}

/// Prints `v` as pretty JSON, or decodes it as `T` and prints `render`'s table.
pub fn show<T: DeserializeOwned>(v: Value, output: Output, render: impl FnOnce(T) -> String) -> anyhow::Result<()> {
    let text = match output {
        Output::Json => serde_json::to_string_pretty(&v)? + "\n",
        Output::Table => render(
            serde_json::from_value(v)
                .map_err(|e| CliError::new(EXIT_OTHER, format!("unexpected answer from the server: {e}")))?,
        ),
    };
    print!("{text}");
    Ok(())
}

/// The contents of `<data-dir>/client.json`, written by `spillway up`.
#[derive(Debug, Default, serde::Deserialize)]
struct ClientFile {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    token: Option<String>,
}

/// Returns the server URL and token to use: the given ones, completed from `<data_dir>/client.json` when one is
/// missing. Errors when no server is known, or when client.json exists but cannot be read.
pub fn resolve(
    server: Option<String>,
    token: Option<String>,
    data_dir: &Path,
) -> anyhow::Result<(String, Option<String>)> {
    if let (Some(s), Some(t)) = (&server, &token) {
        return Ok((s.clone(), Some(t.clone())));
    }
    let path: PathBuf = data_dir.join("client.json");
    let file = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<ClientFile>(&bytes)
            .map_err(|e| CliError::new(EXIT_OTHER, format!("{}: {e}", path.display())))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => ClientFile::default(),
        Err(e) => return Err(CliError::new(EXIT_OTHER, format!("reading {}: {e}", path.display())).into()),
    };
    let server = server.or(file.server).ok_or_else(|| {
        CliError::new(EXIT_OTHER, format!("no server: pass --server or run spillway up (no {})", path.display()))
    })?;
    Ok((server, token.or(file.token)))
}

/// A connection to the daemon's HTTP API.
pub struct Client {
    server: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// Returns a client for `server` (e.g. `http://127.0.0.1:7878`) that sends `token` as a bearer token.
    pub fn new(server: &str, token: Option<String>) -> Self {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(TIMEOUT)).build().into();
        Client { server: server.trim_end_matches('/').to_string(), token, agent }
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// Sends `GET path?query` and returns the body of a 2xx answer; other statuses and failures are [`CliError`]s.
    pub fn get_bytes(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Vec<u8>> {
        let mut req = self.agent.get(format!("{}{path}", self.server));
        for (k, v) in query {
            req = req.query(*k, v);
        }
        if let Some(a) = self.auth() {
            req = req.header(spillway_api::AUTH_HEADER, a);
        }
        self.finish("GET", path, req.call())
    }

    /// Sends `POST path` with `body` as JSON (or no body) and returns the body of a 2xx answer.
    pub fn post_bytes(&self, path: &str, body: Option<&serde_json::Value>) -> anyhow::Result<Vec<u8>> {
        let mut req = self.agent.post(format!("{}{path}", self.server));
        if let Some(a) = self.auth() {
            req = req.header(spillway_api::AUTH_HEADER, a);
        }
        let res = match body {
            Some(b) => {
                let bytes = serde_json::to_vec(b)?;
                // The server reads no further than its limit and closes the connection, which the sender sees
                // as a broken pipe: say what was refused instead, as the server would (413).
                let most = spillway_api::limits::MAX_BODY_BYTES;
                if bytes.len() > most {
                    let what = format!("the request is {} bytes; the server takes at most {most}", bytes.len());
                    return Err(CliError::new(EXIT_REJECTED, format!("rejected (413): {what}")).into());
                }
                req.header("content-type", "application/json").send(&bytes[..])
            }
            None => req.send_empty(),
        };
        self.finish("POST", path, res)
    }

    fn finish(
        &self,
        method: &str,
        path: &str,
        res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<Vec<u8>> {
        self.finish_page(method, path, res).map(|(body, _)| body)
    }

    /// Returns the body of a 2xx answer and its next-page cursor (`X-Next-Cursor`, absent on a last page).
    fn finish_page(
        &self,
        method: &str,
        path: &str,
        res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<(Vec<u8>, Option<String>)> {
        let mut resp = res.map_err(|e| transport_error(&self.server, method, path, e))?;
        let status = resp.status().as_u16();
        let next =
            resp.headers().get(spillway_api::NEXT_CURSOR_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let body = resp
            .body_mut()
            .with_config()
            .limit(BODY_LIMIT)
            .read_to_vec()
            .map_err(|e| transport_error(&self.server, method, path, e))?;
        if (200..300).contains(&status) {
            Ok((body, next))
        } else {
            Err(status_error(method, path, status, &body).into())
        }
    }

    /// Returns up to `limit` items of a paged list (`GET /v1/jobs`, `GET /v1/events`) filtered by `query`: it asks
    /// for pages of at most the server's maximum and follows `X-Next-Cursor` until it has `limit` items or the
    /// server says there are no more.
    pub fn get_list(&self, path: &str, query: &[(&str, String)], limit: usize) -> anyhow::Result<Vec<Value>> {
        let mut items: Vec<Value> = Vec::new();
        let mut cursor: Option<String> = None;
        while items.len() < limit {
            let page = (limit - items.len()).min(spillway_api::limits::MAX_PAGE_LIMIT);
            let mut q: Vec<(&str, String)> = query.to_vec();
            q.push(("limit", page.to_string()));
            if let Some(c) = &cursor {
                q.push(("cursor", c.clone()));
            }
            let mut req = self.agent.get(format!("{}{path}", self.server));
            for (k, v) in &q {
                req = req.query(*k, v);
            }
            if let Some(a) = self.auth() {
                req = req.header(spillway_api::AUTH_HEADER, a);
            }
            let (body, next) = self.finish_page("GET", path, req.call())?;
            let got: Vec<Value> = decode("GET", path, &body)?;
            // A server that pages past what it was asked for still gives no more than `limit` in all.
            items.extend(got.into_iter().take(limit - items.len()));
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        Ok(items)
    }

    /// Sends `GET path?query` and returns the 2xx body decoded as `T`.
    pub fn get_json<T: DeserializeOwned>(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<T> {
        decode("GET", path, &self.get_bytes(path, query)?)
    }

    /// Sends `POST path` with `body` (none when `None`) and returns the 2xx body decoded as `T`.
    pub fn post_json<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: Option<&B>) -> anyhow::Result<T> {
        let body = body.map(serde_json::to_value).transpose()?;
        decode("POST", path, &self.post_bytes(path, body.as_ref())?)
    }

    /// Sends `GET path` and returns the 2xx body as text (invalid UTF-8 replaced).
    #[allow(dead_code)] // for text routes other than logs (`/healthz`, `/metrics`), e.g. from `spillway up`.
    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        Ok(String::from_utf8_lossy(&self.get_bytes(path, &[])?).into_owned())
    }
}

/// Returns `body` decoded as `T`, or an error naming the request when the server's answer does not parse.
fn decode<T: DeserializeOwned>(method: &str, path: &str, body: &[u8]) -> anyhow::Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| CliError::new(EXIT_OTHER, format!("bad answer from the server to {method} {path}: {e}")).into())
}

/// Returns `s` percent-encoded for use as one path segment (everything but unreserved characters is escaped).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_exit_codes() {
        assert_eq!(exit_code_for_status(404), 3);
        assert_eq!(exit_code_for_status(401), 4);
        assert_eq!(exit_code_for_status(403), 4);
        for s in [400, 409, 413, 422] {
            assert_eq!(exit_code_for_status(s), 5);
        }
        assert_eq!(exit_code_for_status(500), 1);
        assert_eq!(exit_code_for_status(503), 1);
    }

    #[test]
    fn status_error_names_the_error_and_field() {
        let e = status_error("POST", "/v1/jobs", 422, br#"{"error":"gpus must be >= 1","field":"gpus"}"#);
        assert_eq!(e.code, 5);
        assert!(e.message.contains("gpus must be >= 1") && e.message.contains("`gpus`"), "{}", e.message);
        let e = status_error("GET", "/v1/jobs?tier=p9", 422, br#"{"error":"no tier `p9`; one of p0","field":"tier"}"#);
        assert_eq!(e.code, 2, "a filter the server refuses is a usage error");
        let e = status_error("GET", "/v1/jobs/9", 404, b"nope");
        assert_eq!(e.code, 3);
        assert!(e.message.contains("nope"), "{}", e.message);
    }

    #[test]
    fn a_body_past_the_servers_limit_is_refused_before_it_is_sent() {
        // Nothing listens on port 9: the refusal comes from the client, as a rejection (5), not "cannot reach" (6).
        let c = Client::new("http://127.0.0.1:9", None);
        let huge = serde_json::json!({ "argv": vec!["x"; 600_000] });
        let e = c.post_bytes("/v1/jobs", Some(&huge)).unwrap_err();
        let e = e.downcast_ref::<CliError>().expect("a CliError");
        assert_eq!(e.code, EXIT_REJECTED, "{}", e.message);
        assert!(e.message.contains("413") && e.message.contains("at most"), "{}", e.message);
    }

    #[test]
    fn missing_server_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("spillway-client-test-{}", std::process::id()));
        let e = match resolve(None, Some("t".into()), &dir) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("no server: pass --server or run spillway up") && e.contains("client.json"), "{e}");
        std::fs::create_dir_all(&dir).ok();
        std::fs::write(dir.join("client.json"), r#"{"server":"http://h:1","token":"abc"}"#).ok();
        let (s, t) = resolve(None, None, &dir).ok().unwrap_or_default();
        assert_eq!((s.as_str(), t.as_deref()), ("http://h:1", Some("abc")));
        let (s, t) = resolve(Some("http://x:2".into()), None, &dir).ok().unwrap_or_default();
        assert_eq!((s.as_str(), t.as_deref()), ("http://x:2", Some("abc")));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Serves `GET /v1/things?limit=N[&cursor=C]` over items 0..10 in pages of at most 3 (whatever `limit` asks),
    /// with `X-Next-Cursor` while items remain; returns its URL and the request lines it saw.
    fn paging_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                while reader.read_line(&mut String::new()).is_ok_and(|n| n > 2) {}
                let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let q = target.split_once('?').map_or("", |(_, q)| q).to_string();
                let get = |k: &str| {
                    q.split('&').find_map(|kv| kv.strip_prefix(&format!("{k}="))).and_then(|v| v.parse::<usize>().ok())
                };
                let from = get("cursor").unwrap_or(0);
                let n = get("limit").unwrap_or(100).min(3);
                let items: Vec<usize> = (from..10).take(n).collect();
                let next = items.last().map(|l| l + 1).filter(|&c| c < 10);
                let body = serde_json::to_string(&items).unwrap_or_default();
                let header = next.map(|c| format!("x-next-cursor: {c}\r\n")).unwrap_or_default();
                log.lock().map(|mut l| l.push(target)).ok();
                let mut out = stream;
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    #[test]
    fn lists_follow_next_cursors_up_to_the_limit() {
        let (url, seen) = paging_server();
        let client = Client::new(&url, Some("t".into()));
        let filter = [("state", "queued".to_string())];
        let got = client.get_list("/v1/things", &filter, 5).unwrap_or_default();
        assert_eq!(got, serde_json::json!([0, 1, 2, 3, 4]).as_array().cloned().unwrap_or_default());
        let lines = seen.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(lines, ["/v1/things?state=queued&limit=5", "/v1/things?state=queued&limit=2&cursor=3"]);
        // Without more pages, the list ends before the limit.
        let all = client.get_list("/v1/things", &[], 1000).unwrap_or_default();
        assert_eq!(all.len(), 10);
        assert_eq!(client.get_list("/v1/things", &[], 0).unwrap_or_default().len(), 0);
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("spot-a_1"), "spot-a_1");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
