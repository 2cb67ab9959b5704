//! The HTTP API (JSON under `/v1`, see `spillway-api`): bearer-token checks, request validation with errors that
//! name the field, and the handlers. Handlers hold the state lock only for the engine call and the log write.

use crate::daemon::{Principal, Shared, interrupt, now_ms};
use crate::store::{Entry, JobCommand};
use crate::views;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use spillway_api::{ErrorBody, Heartbeat, JobSubmit, PoolScale, Protect};
use spillway_core::{Event, JobId, JobSpec, NodeId, SubmitError};
use std::sync::Arc;

type S = State<Arc<Shared>>;

/// An error response: status and [`ErrorBody`].
pub struct ApiError(StatusCode, ErrorBody);

impl ApiError {
    fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError(status, ErrorBody { error: error.into(), field: None })
    }
    fn field(status: StatusCode, field: &str, error: impl Into<String>) -> Self {
        ApiError(status, ErrorBody { error: error.into(), field: Some(field.into()) })
    }
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

type ApiResult<T> = Result<T, ApiError>;

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
        .route("/v1/events", get(list_events))
        .route("/v1/cost", get(cost))
        .route("/v1/agent/heartbeat", post(heartbeat))
        .route("/v1/openapi.json", get(|| async { axum::Json(crate::openapi::document()) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .with_state(shared)
}

/// Returns the bearer token of a request.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

/// Returns who is calling: 401 without a known user token (node tokens are not user tokens).
fn user(s: &Shared, headers: &HeaderMap) -> ApiResult<Principal> {
    let Some(tok) = bearer(headers) else { return Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token")) };
    s.principal(tok).ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unknown token"))
}

/// Returns `Ok` for the admin token, 403 for a team token.
fn admin(s: &Shared, headers: &HeaderMap) -> ApiResult<()> {
    match user(s, headers)? {
        Principal::Admin => Ok(()),
        Principal::Team(t) => Err(ApiError::new(StatusCode::FORBIDDEN, format!("team `{t}` token: this needs the admin token"))),
    }
}

/// Parses a JSON body; errors name the field at fault (`tier`, `env.X`, `gpus`).
fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        // serde names unknown and missing fields only in the message.
        let named = msg.split('`').nth(1).filter(|_| msg.contains("field `")).map(str::to_string);
        let field = if path == "." { named } else { Some(path) };
        let status = if inner.is_syntax() || inner.is_eof() { StatusCode::BAD_REQUEST } else { StatusCode::UNPROCESSABLE_ENTITY };
        ApiError(status, ErrorBody { error: format!("invalid request body: {msg}"), field })
    })
}

/// `POST /v1/jobs`.
async fn submit(State(s): S, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let req: JobSubmit = parse(&body)?;
    let team = match (&who, req.team.clone()) {
        (Principal::Team(t), Some(asked)) if *t != asked => {
            return Err(ApiError::field(StatusCode::FORBIDDEN, "team", format!("a `{t}` token cannot submit for team `{asked}`")));
        }
        (Principal::Team(t), _) => t.clone(),
        (Principal::Admin, team) => team.unwrap_or_else(|| "default".into()),
    };
    let bad = |f: &str, m: String| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, f, m);
    if req.argv.is_empty() || req.argv[0].trim().is_empty() {
        return Err(bad("argv", "argv is empty: give the program and its arguments".into()));
    }
    if !s.has_team(&team) {
        return Err(bad("team", format!("unknown team `{team}`")));
    }
    let secs = |f: &str, v: Option<f64>| -> ApiResult<Option<i64>> {
        match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(bad(f, format!("{f} must be a positive number of seconds, got {x}"))),
            Some(x) => Ok(Some((x * 1000.0) as i64)),
            None => Ok(None),
        }
    };
    let now = now_ms();
    let spec = JobSpec {
        name: req.name.clone().unwrap_or_else(|| "job".into()),
        tier: req.tier.clone(),
        team,
        gpus_per_worker: req.gpus,
        workers: req.workers.unwrap_or(1),
        gpu_model: req.gpu_model.clone(),
        interruptible: req.interruptible,
        checkpoint_interval_ms: secs("checkpoint_interval_s", req.checkpoint_interval_s)?,
        deadline: secs("deadline_s", req.deadline_s)?.map(|d| now + d),
        expected_duration_ms: secs("expected_duration_s", req.expected_duration_s)?,
    };
    let command = JobCommand { argv: req.argv, env: req.env, workdir: req.workdir };
    let mut st = s.state();
    // Check everything the engine would refuse before anything is logged: a refused job stores nothing.
    spillway_core::check_spec(st.engine.config(), &spec).map_err(|e| submit_error(&e))?;
    let id = st.apply(now, Entry::Submit { spec, command })?.ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no job id"))?;
    let view = st.engine.job(id).map(|j| views::job(&st, j));
    drop(st);
    s.flush();
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

/// Maps the engine's refusal to a 422 naming the field (its message starts with the field name).
fn submit_error(e: &SubmitError) -> ApiError {
    let msg = e.to_string();
    let field = msg.split(':').next().unwrap_or("").trim().to_string();
    let field = match field.as_str() {
        "gpus_per_worker" => "gpus",
        "gpu_type" => "gpu_model",
        f if f.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !f.is_empty() => f,
        _ => "",
    };
    if field.is_empty() {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, msg)
    } else {
        let field = field.to_string();
        ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, &field, msg)
    }
}

#[derive(Deserialize)]
struct JobFilter {
    state: Option<String>,
    team: Option<String>,
    tier: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/jobs`: newest first; a team token sees its team's jobs only.
async fn list_jobs(State(s): S, headers: HeaderMap, Query(f): Query<JobFilter>) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let st = s.state();
    let mut out = Vec::new();
    let c = st.engine.cluster();
    let tiers = &st.engine.config().tiers;
    let team_of = |j: &spillway_core::Job| c.teams.get(j.team).map_or("", |t| t.name.as_str());
    // Filters on the engine's job before a view (with its argv) is built for it.
    for j in c.jobs.iter().rev() {
        let mine = match &who {
            Principal::Admin => true,
            Principal::Team(t) => team_of(j) == t.as_str(),
        };
        let keep = mine
            && f.state.as_ref().is_none_or(|x| x == views::job_state(j.state))
            && f.team.as_ref().is_none_or(|x| x == team_of(j))
            && f.tier.as_ref().is_none_or(|x| *x == tiers[j.tier].name);
        if keep {
            out.push(views::job(&st, j));
            if out.len() >= f.limit.unwrap_or(1000) {
                break;
            }
        }
    }
    Ok(axum::Json(out).into_response())
}

/// Returns the job `id` if the caller may see it: 404 if it does not exist, 403 if another team's.
fn visible(s: &Shared, who: &Principal, id: u32) -> ApiResult<spillway_api::JobView> {
    let st = s.state();
    let j = st.engine.job(JobId(id)).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}")))?;
    let v = views::job(&st, j);
    match who {
        Principal::Team(t) if *t != v.team => Err(ApiError::new(StatusCode::FORBIDDEN, format!("job {id} belongs to another team"))),
        _ => Ok(v),
    }
}

async fn get_job(State(s): S, headers: HeaderMap, Path(id): Path<u32>) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    Ok(axum::Json(visible(&s, &who, id)?).into_response())
}

/// `POST /v1/jobs/{id}/cancel`: a queued or running job is cancelled (running workers get SIGTERM and a grace).
async fn cancel_job(State(s): S, headers: HeaderMap, Path(id): Path<u32>) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let v = visible(&s, &who, id)?;
    if !matches!(v.state.as_str(), "queued" | "running") {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("job {id} is already {}", v.state)));
    }
    let mut st = s.state();
    st.apply(now_ms(), Entry::Event(Event::CancelJob { job: JobId(id) }))?;
    let v = st.engine.job(JobId(id)).map(|j| views::job(&st, j));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

/// `GET /v1/jobs/{id}/logs`: every worker's output, rank 0 first (all attempts, appended).
async fn job_logs(State(s): S, headers: HeaderMap, Path(id): Path<u32>) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let v = visible(&s, &who, id)?;
    let dir = s.opts.data_dir.join("logs").join(format!("job-{id}"));
    let mut text = String::new();
    for rank in 0..v.workers {
        if let Ok(t) = std::fs::read_to_string(dir.join(format!("rank-{rank}.log"))) {
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
    Ok(axum::Json(v).into_response())
}

/// `POST /v1/nodes/{id}/interrupt`: a spot interruption notice for the node (admin).
async fn interrupt_node(State(s): S, headers: HeaderMap, Path(id): Path<u32>) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let mut st = s.state();
    if st.engine.cluster().nodes.get(id as usize).is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no node {id}")));
    }
    interrupt(&mut st, now_ms(), id).map_err(|e| ApiError::new(StatusCode::CONFLICT, e))?;
    let v = st.engine.cluster().nodes.get(id as usize).map(|n| views::node(&st, n));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn protect_node(State(s): S, headers: HeaderMap, Path(id): Path<u32>, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let req: Protect = parse(&body)?;
    let mut st = s.state();
    if st.engine.cluster().nodes.get(id as usize).is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no node {id}")));
    }
    st.apply(now_ms(), Entry::Event(Event::SetNodeProtection { node: NodeId(id), protected: req.protected }))?;
    let v = st.engine.cluster().nodes.get(id as usize).map(|n| views::node(&st, n));
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn list_pools(State(s): S, headers: HeaderMap) -> ApiResult<Response> {
    user(&s, &headers)?;
    let st = s.state();
    Ok(axum::Json(views::pools(&st)).into_response())
}

/// Returns the index of pool `name`, or 404.
fn pool_index(st: &crate::state::State, name: &str) -> ApiResult<usize> {
    st.engine.config().pools.iter().position(|p| p.name == name).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no pool `{name}`")))
}

/// `POST /v1/pools/{name}/scale`: new min/max nodes of a cloud pool (admin).
async fn scale_pool(State(s): S, headers: HeaderMap, Path(name): Path<String>, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let req: PoolScale = parse(&body)?;
    let mut st = s.state();
    let pool = pool_index(&st, &name)?;
    let p = &st.engine.config().pools[pool];
    let (min, max) = (req.min_nodes.unwrap_or(p.min_nodes), req.max_nodes.unwrap_or(p.max_nodes));
    if p.market == spillway_core::Market::Fixed {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("pool `{name}` is fixed: its nodes are listed in the config")));
    }
    if min > max {
        return Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "min_nodes", format!("min_nodes {min} > max_nodes {max}")));
    }
    st.apply(now_ms(), Entry::Event(Event::SetPoolBounds { pool, min_nodes: req.min_nodes, max_nodes: req.max_nodes }))?;
    let v = views::pools(&st).into_iter().nth(pool);
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

async fn protect_pool(State(s): S, headers: HeaderMap, Path(name): Path<String>, body: Bytes) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let req: Protect = parse(&body)?;
    let mut st = s.state();
    let pool = pool_index(&st, &name)?;
    st.apply(now_ms(), Entry::Event(Event::SetPoolProtection { pool, protected: req.protected }))?;
    let v = views::pools(&st).into_iter().nth(pool);
    drop(st);
    s.flush();
    Ok(axum::Json(v).into_response())
}

#[derive(Deserialize)]
struct EventFilter {
    job: Option<u32>,
    node: Option<u32>,
    pool: Option<String>,
    kind: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/events`: the decision log, oldest first, the last `limit` (default 200) that match.
async fn list_events(State(s): S, headers: HeaderMap, Query(f): Query<EventFilter>) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let st = s.state();
    let subject = f.job.map(|j| format!("job:{j}")).or(f.node.map(|n| format!("node:{n}"))).or(f.pool.map(|p| format!("pool:{p}")));
    let mut v: Vec<_> = st
        .decisions
        .iter()
        .rev()
        .filter(|e| subject.as_ref().is_none_or(|x| e.subject == *x))
        .filter(|e| f.kind.as_ref().is_none_or(|k| e.kind == *k))
        .take(f.limit.unwrap_or(200))
        .cloned()
        .collect();
    v.reverse();
    Ok(axum::Json(v).into_response())
}

#[derive(Deserialize)]
struct CostWindow {
    since: Option<f64>,
    until: Option<f64>,
}

/// `GET /v1/cost[?since=&until=]`: cumulative cost now, or the cost accrued between two instants (seconds since the
/// epoch). A past instant resolves to the last minute snapshot at or before it (zero before the first).
async fn cost(State(s): S, headers: HeaderMap, Query(w): Query<CostWindow>) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let now = now_ms();
    let ms = |f: &str, v: Option<f64>| -> ApiResult<Option<i64>> {
        match v {
            Some(x) if !x.is_finite() || x < 0.0 => Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, f, format!("{f}: {x} is not a time"))),
            Some(x) => Ok(Some((x * 1000.0) as i64)),
            None => Ok(None),
        }
    };
    let (since, until) = (ms("since", w.since)?, ms("until", w.until)?.map(|u| u.min(now)));
    if let (Some(a), Some(b)) = (since, until) {
        if a > b {
            return Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "since", "since is after until"));
        }
    }
    let st = s.state();
    let at = |t: Option<i64>| -> ApiResult<spillway_api::CostView> {
        match t {
            None => Ok(views::cost(&st, now)),
            Some(t) if t >= now - 1000 => Ok(views::cost(&st, now)),
            Some(t) => match st.store.cost_snapshot_before(t).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))? {
                Some((_, json)) => serde_json::from_str(&json).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
                None => Ok(spillway_api::CostView::default()),
            },
        }
    };
    let end = at(until)?;
    let mut v = match since {
        Some(_) => views::cost_minus(&end, &at(since)?),
        None => end,
    };
    v.since = w.since;
    v.until = Some(until.unwrap_or(now) as f64 / 1000.0);
    Ok(axum::Json(v).into_response())
}

async fn metrics(State(s): S) -> Response {
    let st = s.state();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], views::metrics(&st, now_ms())).into_response()
}

/// `POST /v1/agent/heartbeat`: node tokens only, and only for their own node; 410 when the node is gone.
async fn heartbeat(State(s): S, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let Some(tok) = bearer(&headers) else { return Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token")) };
    let hb: Heartbeat = parse(&body)?;
    let owner = s.node_of_token(tok);
    match owner {
        None => return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unknown node token")),
        Some(n) if n != hb.node => {
            return Err(ApiError::field(StatusCode::FORBIDDEN, "node", format!("node {n}'s token cannot report for node {}", hb.node)));
        }
        Some(_) => {}
    }
    match s.heartbeat(&hb)? {
        Some(reply) => Ok(axum::Json(reply).into_response()),
        None => Err(ApiError::new(StatusCode::GONE, format!("node {} is terminated", hb.node))),
    }
}
