//! The HTTP/1.1 serve loop of the API: hyper connections with axum's router as the service, and the limits a
//! public-facing socket needs so that no client can hold the daemon's resources for long.
//!
//! - Headers must arrive within [`HEADER_READ_TIMEOUT`] of the connection opening or of the previous response;
//!   hyper runs that one timer from the moment a kept-alive connection goes idle, so it is also the keep-alive idle
//!   timeout. A connection that runs out of it is closed without an answer (there is no request to answer).
//! - The request line and headers are at most [`MAX_HEADER_BYTES`] (hyper answers 431 itself, with no body).
//! - The body must arrive within [`BODY_READ_TIMEOUT`] of the headers (408) and be at most
//!   [`spillway_api::limits::MAX_BODY_BYTES`] (413). A body somewhat over the limit is read and dropped before the
//!   413 so that the client, still writing, gets to read it; one declared far larger is refused at once. The
//!   service reads the whole body before the router sees the request, so no handler waits on a slow client.
//! - At most [`MAX_CONNECTIONS`] connections are open at once. A connection beyond that gets a fixed 503 JSON
//!   answer at once (without reading its request) and is closed; at most [`MAX_REJECTING`] such answers are in
//!   flight, and connections beyond even that are closed at once. Refusing costs nothing that a flood could pile up.
//! - On shutdown the listener closes, idle connections close at once, and requests in flight get up to
//!   [`SHUTDOWN_GRACE`] to finish.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use spillway_api::ErrorBody;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// How long a client may take to send a request's headers, and how long a kept-alive connection may sit idle.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The request line and headers, bytes at most (hyper answers 431 beyond, without a body: there is no request
/// to hand to the router).
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// How long a client may take to send a request's body, from the end of its headers.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections at most.
pub const MAX_CONNECTIONS: usize = 256;
/// Over-limit connections being answered 503 at once, at most; beyond it they are closed without an answer.
pub const MAX_REJECTING: usize = 64;
/// How long a refused connection's request is read and dropped after its 503, so that closing with unread
/// input does not reset the connection before the client has read the answer.
const REJECT_LINGER: Duration = Duration::from_millis(500);
/// A body over the limit is read and dropped up to this many times the limit before the 413 (see `read_body`).
const DRAIN_FACTOR: usize = 4;
/// How long requests in flight may take to finish once shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The serve loop's limits; [`Limits::default`] is the daemon's (the constants above).
#[derive(Debug, Clone)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub body_read_timeout: Duration,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub max_rejecting: usize,
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_header_bytes: MAX_HEADER_BYTES,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_body_bytes: spillway_api::limits::MAX_BODY_BYTES,
            max_connections: MAX_CONNECTIONS,
            max_rejecting: MAX_REJECTING,
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}

/// Returns an [`ErrorBody`] JSON response with `status`.
pub fn error_response(status: StatusCode, error: impl Into<String>) -> Response<Body> {
    let body = ErrorBody { error: error.into(), field: None };
    // An ErrorBody is two strings: serializing it cannot fail, but an empty body is still an answer if it did.
    let json = serde_json::to_vec(&body).unwrap_or_default();
    let mut r = Response::new(Body::from(json));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then drains the connections (at most
/// `limits.shutdown_grace`). Accept errors are waited out, never returned: the `Result` is for callers that
/// treat serving like any other I/O.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = Arc::new(limits);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let rejecting = Arc::new(Semaphore::new(limits.max_rejecting));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refuse(stream, &rejecting);
            continue;
        };
        // Small JSON answers: send them at once instead of waiting for more to coalesce.
        let _ = stream.set_nodelay(true);
        let service = service(app.clone(), limits.clone());
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A connection's error (a reset, a header timeout) concerns that client only.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
    Ok(())
}

/// Waits out a failed `accept`: per-connection errors (the peer gave up) are skipped; running out of file
/// descriptors or memory passes once connections close, so the loop pauses briefly; anything else is reported
/// and retried after a second (one bad accept must not take the API down).
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock) {
        return;
    }
    if e.kind() == OutOfMemory || e.raw_os_error().is_some_and(is_resource_error) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        return;
    }
    eprintln!("spillway: accepting a connection: {e}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Returns whether an OS error number says the process or system ran out of descriptors or buffers (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM on Linux, where the daemon runs).
fn is_resource_error(errno: i32) -> bool {
    matches!(errno, 24 | 23 | 105 | 12)
}

/// The 503 sent to a connection over the limit: fixed bytes, written without reading the request.
fn busy_answer() -> Vec<u8> {
    let body = r#"{"error":"too many open connections; retry shortly"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers a connection over the limit with a 503 and closes it; when too many refusals are in flight already it
/// is closed at once (dropped), so a flood costs no more than [`Limits::max_rejecting`] small tasks.
fn refuse(stream: TcpStream, rejecting: &Arc<Semaphore>) {
    let Ok(permit) = rejecting.clone().try_acquire_owned() else { return };
    tokio::spawn(async move {
        let mut stream = stream;
        let answer = busy_answer();
        let linger = async {
            stream.write_all(&answer).await?;
            stream.shutdown().await?;
            // Read and drop what the client sends until it closes (or the linger ends), so that the close is a
            // FIN after our answer rather than a reset that could discard it.
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::time::timeout(REJECT_LINGER, linger).await;
        drop(permit);
    });
}

/// Returns the hyper service of one connection: read the body under the limits, then hand the request to `app`.
fn service(
    app: Router,
    limits: Arc<Limits>,
) -> impl hyper::service::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
{
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let (app, limits) = (app.clone(), limits.clone());
        async move { Ok::<_, Infallible>(handle(app, req, &limits).await) }
    })
}

/// Returns the answer to one request: 413 or 408 when its body breaks the limits, else `app`'s answer.
async fn handle(app: Router, req: Request<Incoming>, limits: &Limits) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let bytes = match read_body(&parts.headers, body, limits).await {
        Ok(b) => b,
        Err(mut refused) => {
            // The rest of the body was never read: the connection cannot carry another request.
            refused.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return refused;
        }
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    match app.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// Why a body was not read.
enum BodyError {
    /// Longer than the bytes to keep.
    TooLarge,
    /// The client broke off or sent a malformed chunk.
    Read(hyper::Error),
}

/// Returns the whole body of a request, or the error response: 413 when it is (or says it is) larger than the
/// limit, 408 when it does not arrive in time, 400 when the client breaks off or sends a malformed chunk.
///
/// A body over the limit is still read, and dropped, up to [`DRAIN_FACTOR`] times the limit within the body
/// timeout: a client that writes its whole body before reading (most do) would otherwise meet a reset instead of
/// the 413. Past that, or when the client waits for `100-continue`, the 413 goes out at once.
async fn read_body(
    headers: &axum::http::HeaderMap,
    mut body: Incoming,
    limits: &Limits,
) -> Result<axum::body::Bytes, Response<Body>> {
    let max = limits.max_body_bytes;
    let drain = max.saturating_mul(DRAIN_FACTOR);
    let too_large =
        || error_response(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is larger than {max} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > max as u64) {
        // Reading the body would ask a 100-continue client to send it; a huge one is not worth reading.
        let expects_continue =
            headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !expects_continue && n <= drain as u64 {
            let _ = tokio::time::timeout(limits.body_read_timeout, collect(&mut body, 0, drain, 0)).await;
        }
        return Err(too_large());
    }
    let capacity = declared.map_or(0, |n| n as usize);
    match tokio::time::timeout(limits.body_read_timeout, collect(&mut body, max, drain, capacity)).await {
        Ok(Ok(bytes)) => Ok(bytes.into()),
        Ok(Err(BodyError::TooLarge)) => Err(too_large()),
        Ok(Err(BodyError::Read(e))) => {
            Err(error_response(StatusCode::BAD_REQUEST, format!("reading the request body: {e}")))
        }
        Err(_) => Err(error_response(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {} s", limits.body_read_timeout.as_secs_f64()),
        )),
    }
}

/// Reads `body` to its end and returns it, when it is at most `keep` bytes; else `TooLarge`, after reading on (and
/// dropping) up to `cap` bytes in all. `capacity` is the length the client declared (at most `keep`).
async fn collect(body: &mut Incoming, keep: usize, cap: usize, capacity: usize) -> Result<Vec<u8>, BodyError> {
    let mut buf = Vec::with_capacity(capacity.min(keep));
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        // Trailers carry no data.
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else { continue };
        total = total.saturating_add(data.len());
        if total > cap {
            return Err(BodyError::TooLarge);
        }
        if total <= keep {
            buf.extend_from_slice(&data);
        }
    }
    if total > keep { Err(BodyError::TooLarge) } else { Ok(buf) }
}
