//! The API's read-outs of money and reasons: `GET /v1/cost` (windows exact to the millisecond), `/v1/budgets`,
//! `/v1/explain/job/{id}`, `/v1/explain/pool/{name}` and `/metrics`.

use crate::api::{
    ApiError, ApiResult, RawPath, S, admin, bad, bearer, number, path_id, path_name, query, shown, user, visible,
};
use crate::daemon::now_ms;
use crate::views;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use spillway_core::JobId;

/// The query of `GET /v1/cost`, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CostWindow {
    since: Option<String>,
    until: Option<String>,
}

/// Returns an instant parameter (seconds since the epoch); 422 naming it unless a finite number >= 0.
fn instant(name: &str, v: Option<&str>) -> ApiResult<Option<f64>> {
    match number::<f64>(name, v)? {
        Some(x) if !x.is_finite() || x < 0.0 => Err(bad(name, format!("{name}: {x} is not a time"))),
        x => Ok(x),
    }
}

/// Returns seconds since the epoch in ms; `as` saturates, so a far-future instant stays far in the future.
fn epoch_ms(secs: f64) -> i64 {
    (secs * 1000.0) as i64
}

/// `GET /v1/cost[?since=&until=]`: cumulative cost now, or the cost accrued between two instants (seconds since the
/// epoch), exact to the millisecond (see `views::cost_at`).
pub(crate) async fn cost(State(s): S, headers: HeaderMap, RawQuery(raw): RawQuery) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let w: CostWindow = query(raw.as_deref())?;
    let now = now_ms();
    let since_s = instant("since", w.since.as_deref())?;
    let since = since_s.map(epoch_ms);
    let until = instant("until", w.until.as_deref())?.map(|u| epoch_ms(u).min(now));
    if let Some(a) = since
        && a > until.unwrap_or(now)
    {
        return Err(bad("since", "since is after until (or in the future)"));
    }
    let st = s.state();
    let at = |t: Option<i64>| -> ApiResult<spillway_api::CostView> {
        views::cost_at(&st, t.unwrap_or(now), now).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))
    };
    let end = at(until)?;
    let mut v = match since {
        Some(_) => views::cost_minus(&end, &at(since)?),
        None => end,
    };
    drop(st);
    v.since = since_s;
    v.until = Some(until.unwrap_or(now) as f64 / 1000.0);
    Ok(axum::Json(v).into_response())
}

/// `GET /v1/explain/job/{id}`: why a job waits, ran where it ran or ended (a team token: its own team's jobs).
pub(crate) async fn explain_job(State(s): S, headers: HeaderMap, id: RawPath) -> ApiResult<Response> {
    let who = user(&s, &headers)?;
    let id = path_id(id)?;
    visible(&s, &who, id)?;
    let st = s.state();
    let reasons = st.engine.explain_job_at(JobId(id), s.now()).unwrap_or_default();
    Ok(axum::Json(explained(format!("job:{id}"), reasons)).into_response())
}

/// `GET /v1/explain/pool/{name}`: why a pool has its size and what would change it.
pub(crate) async fn explain_pool(State(s): S, headers: HeaderMap, name: RawPath) -> ApiResult<Response> {
    user(&s, &headers)?;
    let name = path_name(name)?;
    let st = s.state();
    let Some(reasons) = st.engine.explain_pool_at(&name, s.now()) else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no pool {}", shown(&name))));
    };
    Ok(axum::Json(explained(format!("pool:{name}"), reasons)).into_response())
}

fn explained(subject: String, reasons: Vec<spillway_core::explain::Reason>) -> spillway_api::ExplainView {
    let reasons = reasons
        .into_iter()
        .map(|r| spillway_api::ReasonView {
            code: r.code.into(),
            pool: r.pool,
            until: r.until.map(|t| t as f64 / 1000.0),
            text: r.text,
        })
        .collect();
    spillway_api::ExplainView { subject, reasons }
}

/// `GET /v1/budgets`: each team budget's spend in its current period (admin).
pub(crate) async fn budgets(State(s): S, headers: HeaderMap) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let v: Vec<spillway_api::BudgetView> = s
        .state()
        .engine
        .budget_status(now_ms())
        .into_iter()
        .map(|b| spillway_api::BudgetView {
            team: b.team,
            period: b.period.as_str().into(),
            period_start: b.period_start as f64 / 1000.0,
            limit_usd: b.limit_usd,
            spent_usd: b.spent_usd,
            hard_cap: b.hard_cap,
            capping: b.capping,
        })
        .collect();
    Ok(axum::Json(v).into_response())
}

/// `GET /metrics`: OpenMetrics for a client that asks for it (Prometheus does), else the classic text format.
pub(crate) async fn metrics(State(s): S, headers: HeaderMap) -> Response {
    if !s.may_read_metrics(bearer(&headers)) {
        let e = ApiError::new(StatusCode::UNAUTHORIZED, "/metrics needs the metrics token (or the admin token)");
        return e.into_response();
    }
    let text = crate::metrics::render(&mut s.state(), now_ms());
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
        ([(header::CONTENT_TYPE, crate::metrics::OPENMETRICS)], text).into_response()
    } else {
        ([(header::CONTENT_TYPE, crate::metrics::TEXT)], crate::metrics::classic_text(&text)).into_response()
    }
}
