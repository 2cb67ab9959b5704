//! `POST /v1/slurm/resume` and `POST /v1/slurm/suspend` (admin): what `spillway slurm resume|suspend` sends on
//! Slurm's behalf. A malformed hostlist or a name no node set lists is a 422 and changes nothing; a name that
//! cannot be acted on (already up, not up) is reported in the reply, and the other names go ahead.

use super::SlurmError;
use crate::api::{ApiError, ApiResult, admin, parse};
use crate::daemon::Shared;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use spillway_api::{SlurmOutcome, SlurmReply, SlurmRequest};
use std::sync::Arc;

/// `POST /v1/slurm/resume`.
pub async fn resume(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    run(s, headers, body, true).await
}

/// `POST /v1/slurm/suspend`.
pub async fn suspend(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    run(s, headers, body, false).await
}

/// Checks the caller, then runs the request off the async threads (it calls `squeue`).
async fn run(s: Arc<Shared>, headers: HeaderMap, body: Bytes, resume: bool) -> ApiResult<Response> {
    admin(&s, &headers)?;
    let req: SlurmRequest = parse(&body)?;
    let done =
        tokio::task::spawn_blocking(
            move || {
                if resume { s.slurm_resume(&req.hosts) } else { s.slurm_suspend(&req.hosts) }
            },
        )
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let out = done.map_err(|e| match e {
        SlurmError::NotConfigured => ApiError::new(StatusCode::NOT_FOUND, e.to_string()),
        SlurmError::Bad(m) => ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            spillway_api::ErrorBody { error: m, field: Some("hosts".into()) },
        ),
        SlurmError::Stopped(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
    })?;
    let nodes = out
        .into_iter()
        .map(|(name, r)| match r {
            Ok(node) => SlurmOutcome { name, node: Some(node), error: None },
            Err(e) => SlurmOutcome { name, node: None, error: Some(e) },
        })
        .collect();
    Ok(axum::Json(SlurmReply { nodes }).into_response())
}
