//! The HTTP API (JSON under `/v1`, see `spillway-api`): bearer-token checks, request validation with errors that
//! name the field, and the handlers.
//!
//! Every handler checks the caller's token first and only then looks at what the caller sent: path ids, query and
//! body arrive as raw strings and bytes and are parsed after the check, so a caller without a valid token learns
//! nothing but 401 (not even which ids parse). Every error is an [`ErrorBody`]: the handlers build them, and
//! [`json_errors`] turns anything else (axum's 405, a rejection, a serialization failure) into one.
//!
//! Handlers hold the state lock only for the engine call and the log write, or to build one bounded page of
//! views; responses are serialized after the lock is released.

use crate::daemon::{Principal, Shared, now_ms};
use crate::store::{Entry, JobCommand};
use crate::views;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use spillway_api::limits::{DEFAULT_PAGE_LIMIT, MAX_BODY_BYTES, MAX_PAGE_LIMIT};
use spillway_api::{ErrorBody, Heartbeat, JobSubmit, NEXT_CURSOR_HEADER, PoolScale, Protect};
use spillway_core::{Event, JobId, JobSpec, NodeId, SubmitError, Time};
use std::sync::Arc;

pub(crate) type S = State<Arc<Shared>>;

/// A path parameter as the router found it, parsed only after the token check.
pub(crate) type RawPath = Result<Path<String>, PathRejection>;

/// An error response: status and [`ErrorBody`].
pub struct ApiError(pub(crate) StatusCode, pub(crate) ErrorBody);

impl ApiError {
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError(status, ErrorBody { error: error.into(), field: None })
    }
    fn field(status: StatusCode, field: &str, error: impl Into<String>) -> Self {
        ApiError(status, ErrorBody { error: error.into(), field: Some(field.into()) })
    }
}

/// Returns a 422 naming `field`.
pub(crate) fn bad(field: &str, error: impl Into<String>) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, error)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(self.1)).into_response()
    }
}

impl From<crate::state::ApplyError> for ApiError {
    fn from(e: crate::state::ApplyError) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// Returns the router of the whole API.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/jobs/{id}/logs", get(job_logs))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{id}/interrupt", post(interrupt_node))
        .route("/v1/nodes/{id}/protect", post(protect_node))
        .route("/v1/pools", get(list_pools))
        .route("/v1/pools/{name}/scale", post(scale_pool))
        .route("/v1/pools/{name}/protect", post(protect_pool))
        .route("/v1/pools/{name}/what-if", get(pool_what_if))
        .route("/v1/events", get(list_events))
        .route("/v1/cost", get(crate::api_insight::cost))
        .route("/v1/budgets", get(crate::api_insight::budgets))
        .route("/v1/explain/job/{id}", get(crate::api_insight::explain_job))
        .route("/v1/explain/pool/{name}", get(crate::api_insight::explain_pool))
        .route("/v1/agent/heartbeat", post(heartbeat))
        .route("/v1/slurm/resume", post(crate::slurm::api::resume))
        .route("/v1/slurm/suspend", post(crate::slurm::api::suspend))
        .route("/v1/openapi.json", get(|| async { axum::Json(crate::openapi::document()) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }))
        .route("/metrics", get(crate::api_insight::metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        // The serve loop (`http.rs`) enforces the same limit before the router; this one covers the router alone.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(shared)
}

/// Returns `r` unchanged unless it is a 4xx/5xx that is not JSON (axum's 405, an extractor rejection, a failed
/// serialization); that becomes an [`ErrorBody`] carrying its text, with the same status and other headers.
async fn json_errors(r: Response) -> Response {
    let status = r.status();
    let json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    // Error texts are short; a long one is not worth reading in full.
    let text = axum::body::to_bytes(body, 4096)
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let error = match (text.is_empty(), parts.headers.get(header::ALLOW).and_then(|v| v.to_str().ok())) {
        (false, _) => text,
        (true, Some(allow)) if status == StatusCode::METHOD_NOT_ALLOWED => {
            format!("method not allowed; this route allows {allow}")
        }
        (true, _) => status.canonical_reason().unwrap_or("error").to_lowercase(),
    };
    let body = serde_json::to_vec(&ErrorBody { error, field: None }).unwrap_or_default();
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// Returns the bearer token of a request.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    // The scheme is case-insensitive (RFC 9110).
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).and_then(|_| v.get(7..)).map(str::trim)
}

/// Returns who is calling: 401 without a known user token (node tokens are not user tokens).
pub(crate) fn user(s: &Shared, headers: &HeaderMap) -> ApiResult<Principal> {
    let Some(tok) = bearer(headers) else {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token"));
    };
    s.principal(tok).ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unknown token"))
}

/// Returns `Ok` for the admin token, 403 for a team token.
pub(crate) fn admin(s: &Shared, headers: &HeaderMap) -> ApiResult<()> {
    match user(s, headers)? {
        Principal::Admin => Ok(()),
        Principal::Team(t) => {
            Err(ApiError::new(StatusCode::FORBIDDEN, format!("team `{t}` token: this needs the admin token")))
        }
    }
}

/// Returns `v` for an error message: quoted and escaped, cut after 64 characters (a query value can be long).
pub(crate) fn shown(v: &str) -> String {
    let cut: String = v.chars().take(64).collect();
    if cut.len() < v.len() { format!("{cut:?}...") } else { format!("{cut:?}") }
}

/// Returns the field a serde message names (`unknown field `x``, `missing field `x``, `duplicate field `x``).
fn named_field(msg: &str) -> Option<String> {
    msg.split('`').nth(1).filter(|_| msg.contains("field `")).map(str::to_string)
}

/// Parses a JSON body: exactly one JSON value, then only whitespace. Errors name the field at fault (`tier`,
/// `env.X`, `gpus`): 400 for malformed JSON or trailing input, 422 for a well-formed value of the wrong shape.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        // serde names unknown and missing fields only in the message.
        let field = if path == "." { named_field(&msg) } else { Some(path) };
        let status = if inner.is_syntax() || inner.is_eof() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        ApiError(status, ErrorBody { error: format!("invalid request body: {msg}"), field })
    })?;
    // A second value or garbage after the first is a malformed request, not something to ignore.
    de.end().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: trailing input after the JSON value ({e})"),
        )
    })?;
    Ok(value)
}

/// Parses a query string into `T` (whose fields are all optional strings, unknown ones refused): 422 naming the
/// parameter at fault.
pub(crate) fn query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> ApiResult<T> {
    serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| {
        let msg = e.to_string();
        ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorBody { error: format!("invalid query: {msg}"), field: named_field(&msg) },
        )
    })
}

/// Returns the page size a `limit` parameter asks for: the default when absent, 422 unless 1..=1000.
fn page_limit(v: Option<&str>) -> ApiResult<usize> {
    let Some(v) = v else { return Ok(DEFAULT_PAGE_LIMIT) };
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => Ok(n),
        _ => Err(bad("limit", format!("limit must be an integer from 1 to {MAX_PAGE_LIMIT}, got {}", shown(v)))),
    }
}

/// Returns the position a `cursor` parameter stands for (`None` when absent), 422 when it is none of ours.
fn cursor<T: std::str::FromStr>(v: Option<&str>) -> ApiResult<Option<T>> {
    v.map(|c| {
        c.parse::<T>()
            .map_err(|_| bad("cursor", format!("{} is not a cursor of this list (use X-Next-Cursor)", shown(c))))
    })
    .transpose()
}

/// Returns a numeric query parameter (`None` when absent), 422 naming it when it does not parse.
pub(crate) fn number<T: std::str::FromStr>(name: &str, v: Option<&str>) -> ApiResult<Option<T>> {
    v.map(|x| x.parse::<T>().map_err(|_| bad(name, format!("{name} must be a number, got {}", shown(x))))).transpose()
}

/// Returns a query parameter that must be a count or an id (0 to 4294967295), or `None` when absent; 422
/// naming the parameter and the range otherwise.
fn whole(name: &str, v: Option<&str>) -> ApiResult<Option<u32>> {
    let refuse = |x: &str| bad(name, format!("{name} must be a whole number from 0 to {}, got {}", u32::MAX, shown(x)));
    v.map(|x| x.parse::<u32>().map_err(|_| refuse(x))).transpose()
}

/// Returns the id in a path once the caller is known: 400 naming `id` when it is not one.
pub(crate) fn path_id(p: RawPath) -> ApiResult<u32> {
    let bad_id = |what: &str| ApiError::field(StatusCode::BAD_REQUEST, "id", format!("{what} is not an id"));
    match p {
        // One spelling per id (`7`, not `+7` or `007`), so an id never reads as another resource's name.
        Ok(Path(s)) => s.parse::<u32>().ok().filter(|n| n.to_string() == s).ok_or_else(|| bad_id(&shown(&s))),
        Err(_) => Err(bad_id("the path segment")),
    }
}

/// Returns the name in a path once the caller is known: 400 naming `name` when it does not decode.
pub(crate) fn path_name(p: RawPath) -> ApiResult<String> {
    p.map(|Path(s)| s)
        .map_err(|e| ApiError::field(StatusCode::BAD_REQUEST, "name", format!("bad name in the path: {e}")))
}

/// Returns the JSON array `page.items`, serialized now (the caller has released the state lock), with the next
/// page as `Link: <path?query>; rel="next"` and `X-Next-Cursor`. `params` are the query parameters to repeat.
fn page_response<T: serde::Serialize>(path: &str, mut params: Vec<(&str, String)>, page: views::Page<T>) -> Response {
    let mut r = axum::Json(page.items).into_response();
    if let Some(next) = page.next {
        params.push(("cursor", next.clone()));
        // Pairs of strings always encode.
        let qs = serde_urlencoded::to_string(&params).unwrap_or_default();
        if let Ok(v) = HeaderValue::from_str(&format!("<{path}?{qs}>; rel=\"next\"")) {
            r.headers_mut().insert(header::LINK, v);
        }
        if let Ok(v) = HeaderValue::from_str(&next) {
            r.headers_mut().insert(NEXT_CURSOR_HEADER, v);
        }
    }
    r
}

/// `POST /v1/jobs`: the token, then the body's shape and limits, then the team and the engine's checks; a refused
/// job stores nothing.
async fn submit(State(s): S, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let req: JobSubmit = parse(&body)?;
    req.check().map_err(|e| ApiError(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let team = match (&who, req.team.clone()) {
        (Principal::Team(t), Some(asked)) if *t != asked => {
            return Err(ApiError::field(
                StatusCode::FORBIDDEN,
                "team",
                format!("a `{t}` token cannot submit for team `{asked}`"),
            ));
        }
        (Principal::Team(t), _) => t.clone(),
        (Principal::Admin, team) => team.unwrap_or_else(|| "default".into()),
    };
    if !s.has_team(&team) {
        return Err(bad("team", format!("unknown team `{team}`")));
    }
    let now = now_ms();
    let spec = spec_of(&req, team, now)?;
    let command = JobCommand { argv: req.argv, env: req.env, workdir: req.workdir };
    let mut st = s.state();
    // Check everything the engine would refuse before anything is logged: a refused job stores nothing.
    spillway_core::check_new_spec(st.engine.config(), &spec).map_err(|e| submit_error(&e))?;
    // A team's unfinished work is bounded, so one token cannot grow the daemon's memory without end.
    if let Err((jobs, bytes)) = st.backlog_room(&spec.team, command.bytes()) {
        let msg = format!(
            "team `{}` has {jobs} unfinished jobs holding {} MiB of commands (at most {} jobs and {} MiB): \
             wait for some to end",
            spec.team,
            bytes >> 20,
            crate::state::MAX_BACKLOG_JOBS,
            crate::state::MAX_BACKLOG_BYTES >> 20
        );
        return Err(ApiError::field(StatusCode::TOO_MANY_REQUESTS, "team", msg));
    }
    let id = st
        .apply(now, Entry::Submit { spec, command })?
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no job id"))?;
    let view = st.engine.job(id).map(|j| views::job(&st, j, now));
    drop(st);
    s.flush();
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

/// Returns milliseconds for seconds already checked to be positive and at most ten years (so the product fits),
/// rounded up so that no positive duration becomes 0 ms.
fn ms(secs: f64) -> i64 {
    (secs * 1000.0).ceil() as i64
}

/// Returns the engine's spec of a checked submission at `now`; 422 for a deadline past what a time can hold.
fn spec_of(req: &JobSubmit, team: String, now: Time) -> ApiResult<JobSpec> {
    let deadline = match req.deadline_s {
        Some(d) => Some(
            now.checked_add(ms(d))
                .ok_or_else(|| bad("deadline_s", "deadline_s puts the deadline beyond the clock's range"))?,
        ),
        None => None,
    };
    let workers = match (req.workers, req.max_workers) {
        (Some(a), Some(b)) if a != b => {
            return Err(bad("max_workers", "max_workers and workers name the same thing and differ: give one"));
        }
        (a, b) => a.or(b).unwrap_or(1),
    };
    Ok(JobSpec {
        name: req.name.as_deref().unwrap_or("job").into(),
        tier: req.tier.as_str().into(),
        team: team.into(),
        gpus_per_worker: req.gpus,
        workers,
        min_workers: req.min_workers,
        gpu_model: req.gpu_model.clone(),
        interruptible: req.interruptible,
        checkpoint_interval_ms: req.checkpoint_interval_s.map(ms),
        deadline,
        expected_duration_ms: req.expected_duration_s.map(ms),
        checkpoint_gb: req.checkpoint_gb,
        data_region: req.data_region.clone(),
    })
}

/// Maps the engine's refusal to a 422 naming the field (its message starts with the field name).
fn submit_error(e: &SubmitError) -> ApiError {
    // The engine names its own fields; the API's request names some of them differently.
    let field = match e.field() {
        "gpus_per_worker" => "gpus",
        "gpu_type" => "gpu_model",
        "checkpoint_interval_ms" => "checkpoint_interval_s",
        "expected_duration_ms" => "expected_duration_s",
        "deadline" => "deadline_s",
        f => f,
    };
    let msg = e.to_string();
    if field.is_empty() { ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, msg) } else { bad(field, msg) }
}

/// The query of `GET /v1/jobs`, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobQuery {
    state: Option<String>,
    team: Option<String>,
    tier: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /v1/jobs`: one page, newest first; a team token sees its team's jobs only. Filter values that name no
/// state, team or tier are refused (422), not answered with an empty list.
async fn list_jobs(State(s): S, headers: HeaderMap, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let q: JobQuery = query(raw.as_deref())?;
    let limit = page_limit(q.limit.as_deref())?;
    let from = cursor::<u32>(q.cursor.as_deref())?;
    let state = match q.state.as_deref() {
        Some(x) => Some(views::parse_job_state(x).ok_or_else(|| {
            bad("state", format!("no job state {}; one of queued, running, succeeded, failed, cancelled", shown(x)))
        })?),
        None => None,
    };
    if let Some(t) = q.team.as_deref().filter(|t| !s.has_team(t)) {
        return Err(bad("team", format!("no team {}; one of {}", shown(t), s.team_names().join(", "))));
    }
    let st = s.state();
    let cfg = st.engine.config();
    let tier = match q.tier.as_deref() {
        Some(x) => Some(cfg.tier_index(x).ok_or_else(|| {
            let names: Vec<&str> = cfg.tiers.iter().map(|t| t.name.as_str()).collect();
            bad("tier", format!("no tier {}; one of {}", shown(x), names.join(", ")))
        })?),
        None => None,
    };
    let c = st.engine.cluster();
    // Teams get an index with their first job; a team without one matches nothing (`Some(None)`).
    let index = |t: &str| c.team_index.get(t).copied();
    let visible = match &who {
        Principal::Admin => None,
        Principal::Team(t) => Some(index(t)),
    };
    let team = q.team.as_deref().map(index);
    let page = views::jobs_page(&st, s.now(), from, limit, |j| {
        visible.is_none_or(|v| v == Some(j.team))
            && team.is_none_or(|v| v == Some(j.team))
            && state.is_none_or(|x| x == j.state)
            && tier.is_none_or(|x| x == j.tier)
    });
    drop(st);
    let params =
        [("state", q.state), ("team", q.team), ("tier", q.tier)].into_iter().filter_map(|(k, v)| v.map(|v| (k, v)));
    let params = params.chain([("limit", limit.to_string())]).collect();
    Ok(page_response("/v1/jobs", params, page))
}

/// Returns the job `id` if the caller may see it: 404 if it does not exist, 403 if another team's.
pub(crate) fn visible(s: &Shared, who: &Principal, id: u32) -> ApiResult<spillway_api::JobView> {
    let st = s.state();
    let j = st.engine.job(JobId(id)).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}")))?;
    let v = views::job(&st, j, s.now());
    drop(st);
    match who {
        Principal::Team(t) if *t != v.team => {
            Err(ApiError::new(StatusCode::FORBIDDEN, format!("job {id} belongs to another team")))
        }
        _ => Ok(v),
    }
}

async fn get_job(State(s): S, headers: HeaderMap, id: RawPath) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let id = path_id(id)?;
    Ok(axum::Json(visible(&s, &who, id)?).into_response())
}

/// `POST /v1/jobs/{id}/cancel`: a queued or running job is cancelled (running workers get SIGTERM and a grace).
async fn cancel_job(State(s): S, headers: HeaderMap, id: RawPath) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let id = path_id(id)?;
    let v = visible(&s, &who, id)?;
    if !matches!(v.state.as_str(), "queued" | "running") {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("job {id} is already {}", v.state)));
    }
    let mut st = s.state();
    st.apply(now_ms(), Entry::Event(Event::CancelJob { job: JobId(id) }))?;
    let v = st.engine.job(JobId(id)).map(|j| views::job(&st, j, s.now()));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

/// `GET /v1/jobs/{id}/logs`: every worker's output, rank 0 first (all attempts, appended).
/// The most of each worker's log `GET /v1/jobs/{id}/logs` returns: its last 8 MiB.
const MAX_LOG_BYTES: u64 = 8 << 20;

/// What `GET /v1/jobs/{id}/logs` may be asked: one rank's log from a byte offset (what `logs --follow` reads).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    rank: Option<u32>,
    from: Option<u64>,
}

/// The most bytes one `?rank=&from=` read returns (a follower reads again for the rest).
const LOG_CHUNK_BYTES: u64 = 1 << 20;

/// `GET /v1/jobs/{id}/logs`: the tail of every rank's log (with a `==> rank N <==` line before each of a gang's);
/// with `?rank=R[&from=N]`, the raw bytes of rank R's log from byte N (at most 1 MiB; empty at its end).
async fn job_logs(State(s): S, headers: HeaderMap, id: RawPath, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let id = path_id(id)?;
    let q: LogQuery = query(raw.as_deref())?;
    let v = visible(&s, &who, id)?;
    let dir = s.job_dir(id).join("logs");
    if let Some(rank) = q.rank {
        if rank >= v.workers {
            return Err(bad(
                "rank",
                format!("job {id} has {} rank(s): 0 to {}", v.workers, v.workers.saturating_sub(1)),
            ));
        }
        let name = format!("rank-{rank}.log");
        let bytes =
            crate::datadir::read_log_from(&dir, &name, q.from.unwrap_or(0), LOG_CHUNK_BYTES).unwrap_or_default();
        return Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response());
    }
    if q.from.is_some() {
        return Err(bad("from", "`from` reads one rank's log: give `rank` too"));
    }
    let mut text = String::new();
    for rank in 0..v.workers {
        if let Some(t) = crate::datadir::read_log_tail(&dir, &format!("rank-{rank}.log"), MAX_LOG_BYTES) {
            if v.workers > 1 {
                text += &format!("==> rank {rank} <==\n");
            }
            text += &t;
        }
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

async fn list_nodes(State(s): S, headers: HeaderMap) -> ApiResult<Response> {
    user(&s, &headers)?;
    let st = s.state();
    let v: Vec<_> = st.engine.cluster().nodes.iter().map(|n| views::node(&st, n)).collect();
    drop(st);
    Ok(axum::Json(v).into_response())
}

/// `POST /v1/nodes/{id}/interrupt`: a spot interruption notice for the node (admin).
async fn interrupt_node(State(s): S, headers: HeaderMap, id: RawPath) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let id = path_id(id)?;
    let mut st = s.state();
    if st.engine.cluster().nodes.get(id as usize).is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no node {id}")));
    }
    st.interrupt(now_ms(), id).map_err(|e| match e {
        // The engine's refusal: not a live spot node, or already under notice.
        crate::state::ApplyError::Engine(m) => ApiError::new(StatusCode::CONFLICT, m),
        other => ApiError::from(other),
    })?;
    let v = st.engine.cluster().nodes.get(id as usize).map(|n| views::node(&st, n));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn protect_node(State(s): S, headers: HeaderMap, id: RawPath, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let id = path_id(id)?;
    let req: Protect = parse(&body)?;
    let mut st = s.state();
    match st.engine.cluster().nodes.get(id as usize) {
        None => return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no node {id}"))),
        // Protection from scale-in means nothing to a node that is gone.
        Some(n) if !n.alive() => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("node {id} is {}: nothing to protect", crate::views::node_state(n.state)),
            ));
        }
        Some(_) => {}
    }
    st.apply(now_ms(), Entry::Event(Event::SetNodeProtection { node: NodeId(id), protected: req.protected }))?;
    let v = st.engine.cluster().nodes.get(id as usize).map(|n| views::node(&st, n));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn list_pools(State(s): S, headers: HeaderMap) -> ApiResult<Response> {
    user(&s, &headers)?;
    let v = views::pools(&s.state());
    Ok(axum::Json(v).into_response())
}

/// Returns the index of pool `name`, or 404.
fn pool_index(st: &crate::state::State, name: &str) -> ApiResult<usize> {
    st.engine
        .config()
        .pools
        .iter()
        .position(|p| p.name == name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no pool {}", shown(name))))
}

/// `POST /v1/pools/{name}/scale`: new min/max nodes of a cloud pool (admin).
async fn scale_pool(State(s): S, headers: HeaderMap, name: RawPath, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let name = path_name(name)?;
    let req: PoolScale = parse(&body)?;
    let mut st = s.state();
    let pool = pool_index(&st, &name)?;
    let p = &st.engine.config().pools[pool];
    let (min, max) = (req.min_nodes.unwrap_or(p.min_nodes), req.max_nodes.unwrap_or(p.max_nodes));
    if p.market == spillway_core::Market::Fixed {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("pool `{name}` is fixed: its nodes are listed in the config"),
        ));
    }
    if min > max {
        return Err(bad("min_nodes", format!("min_nodes {min} > max_nodes {max}")));
    }
    if u64::from(max) > spillway_core::config::MAX_POOL_NODES {
        let most = spillway_core::config::MAX_POOL_NODES;
        return Err(bad("max_nodes", format!("{max} nodes is more than a pool may have ({most})")));
    }
    st.apply(
        now_ms(),
        Entry::Event(Event::SetPoolBounds { pool, min_nodes: req.min_nodes, max_nodes: req.max_nodes }),
    )?;
    let v = views::pools(&st).into_iter().nth(pool);
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn protect_pool(State(s): S, headers: HeaderMap, name: RawPath, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let name = path_name(name)?;
    let req: Protect = parse(&body)?;
    let mut st = s.state();
    let pool = pool_index(&st, &name)?;
    st.apply(now_ms(), Entry::Event(Event::SetPoolProtection { pool, protected: req.protected }))?;
    let v = views::pools(&st).into_iter().nth(pool);
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

/// The query of `GET /v1/pools/{name}/what-if`, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WhatIfQuery {
    max_nodes: Option<String>,
    ignore_cooldown: Option<String>,
}

/// `GET /v1/pools/{name}/what-if?max_nodes=N[&ignore_cooldown=true]`: what a cloud pool would launch now for the
/// jobs the last decision pass left waiting, were its max `N` (default: its max now); changes nothing (admin).
async fn pool_what_if(State(s): S, headers: HeaderMap, name: RawPath, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    // Admin: the answer counts every team's waiting jobs.
    admin(&s, &headers)?;
    let name = path_name(name)?;
    let q: WhatIfQuery = query(raw.as_deref())?;
    let max_nodes = whole("max_nodes", q.max_nodes.as_deref())?;
    let ignore_cooldown = match q.ignore_cooldown.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => return Err(bad("ignore_cooldown", format!("ignore_cooldown: {} is not true or false", shown(v)))),
    };
    let st = s.state();
    let pool = pool_index(&st, &name)?;
    let change = spillway_core::PoolChange { max_nodes, ignore_cooldown };
    let Some(w) = st.engine.what_if(&name, change) else {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("pool `{name}` is fixed: it never launches nodes")));
    };
    let now = st.engine.now();
    let v = spillway_api::WhatIfView {
        pool: w.pool,
        max_nodes: max_nodes.unwrap_or(st.engine.config().pools[pool].max_nodes),
        launches: w
            .launches
            .into_iter()
            .map(|(instance_type, nodes)| spillway_api::WhatIfLaunch { instance_type, nodes })
            .collect(),
        not_grown: w.not_grown.map(|g| g.code().to_string()),
        not_grown_detail: w.not_grown.map(|g| g.describe(now)),
        jobs: w.jobs,
        may_use: w.may_use,
    };
    Ok(axum::Json(v).into_response())
}

/// The query of `GET /v1/events`, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventQuery {
    job: Option<String>,
    node: Option<String>,
    pool: Option<String>,
    kind: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// Returns the event subject `q` asks for (`job:3`, `node:1`, `pool:spot`), checking numbers and that at most one
/// of `job`, `node` and `pool` is given; 422 naming the parameter.
fn event_subject(q: &EventQuery) -> ApiResult<Option<String>> {
    let given: Vec<&str> = [("job", &q.job), ("node", &q.node), ("pool", &q.pool)]
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect();
    if let Some(second) = given.get(1) {
        return Err(bad(second, "give at most one of job, node and pool"));
    }
    if let Some(j) = whole("job", q.job.as_deref())? {
        return Ok(Some(format!("job:{j}")));
    }
    if let Some(n) = whole("node", q.node.as_deref())? {
        return Ok(Some(format!("node:{n}")));
    }
    Ok(q.pool.as_ref().map(|p| format!("pool:{p}")))
}

/// `GET /v1/events`: one page of the decision log, oldest first (admin). Unknown kinds and pools are refused.
async fn list_events(State(s): S, headers: HeaderMap, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let q: EventQuery = query(raw.as_deref())?;
    let limit = page_limit(q.limit.as_deref())?;
    let from = cursor::<u64>(q.cursor.as_deref())?;
    let subject = event_subject(&q)?;
    let kind = q.kind.as_deref();
    if let Some(k) = kind.filter(|k| !views::DECISION_KINDS.iter().any(|d| views::decision_kind(*d) == *k)) {
        let names: Vec<&str> = views::DECISION_KINDS.iter().map(|d| views::decision_kind(*d)).collect();
        return Err(bad("kind", format!("no event kind {}; one of {}", shown(k), names.join(", "))));
    }
    let st = s.state();
    if let Some(p) = q.pool.as_deref() {
        pool_index(&st, p).map_err(|e| {
            let names: Vec<&str> = st.engine.config().pools.iter().map(|x| x.name.as_str()).collect();
            bad("pool", format!("{}; one of {}", e.1.error, names.join(", ")))
        })?;
    }
    // An unknown job or node has no events; say so rather than answer an empty page.
    if let Some(j) = whole("job", q.job.as_deref())?.filter(|&j| st.engine.job(JobId(j)).is_none()) {
        return Err(bad("job", format!("no job {j}")));
    }
    if let Some(n) = whole("node", q.node.as_deref())?.filter(|&n| st.engine.cluster().nodes.get(n as usize).is_none())
    {
        return Err(bad("node", format!("no node {n}")));
    }
    let page = views::events_page(&st, from, limit, |e| {
        subject.as_ref().is_none_or(|x| e.subject == *x) && kind.is_none_or(|k| e.kind == k)
    });
    drop(st);
    let params = [("job", q.job), ("node", q.node), ("pool", q.pool), ("kind", q.kind)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)));
    let params = params.chain([("limit", limit.to_string())]).collect();
    Ok(page_response("/v1/events", params, page))
}

/// `POST /v1/agent/heartbeat`: node tokens only, and only for their own node; 410 when the node is gone. The
/// token is checked before the body is parsed.
async fn heartbeat(State(s): S, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let Some(tok) = bearer(&headers) else {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token"));
    };
    let Some(owner) = s.node_of_token(tok) else {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unknown node token"));
    };
    let hb: Heartbeat = parse(&body)?;
    if owner != hb.node {
        return Err(ApiError::field(
            StatusCode::FORBIDDEN,
            "node",
            format!("node {owner}'s token cannot report for node {}", hb.node),
        ));
    }
    match s.heartbeat(&hb, tok)? {
        Some(reply) => Ok(axum::Json(reply).into_response()),
        None => Err(ApiError::new(StatusCode::GONE, format!("node {} is terminated", hb.node))),
    }
}
