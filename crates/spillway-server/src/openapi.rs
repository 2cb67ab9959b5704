//! The OpenAPI 3.1 document of the API (`GET /v1/openapi.json`), written out by hand from the routes in `api.rs`
//! and the wire types in `spillway-api`.

use serde_json::{Value, json};
use spillway_api::limits::*;

/// The error statuses every operation may answer, each with an `ErrorBody`: the handlers' (400, 401, 403, 404,
/// 409, 422), the serve loop's (408 slow body, 413 large body, 503 too many connections) and 500.
const ERRORS: [&str; 10] = ["400", "401", "403", "404", "408", "409", "413", "422", "500", "503"];

/// Returns one operation: summary, whether it takes a JSON body, and its success status.
fn op(summary: &str, body: Option<&str>, ok: &str, schema: Value) -> Value {
    let mut responses = serde_json::Map::new();
    responses.insert(ok.into(), json!({"description": "success", "content": {"application/json": {"schema": schema}}}));
    for e in ERRORS {
        responses.insert(e.into(), json!({"$ref": "#/components/responses/Error"}));
    }
    let mut o = json!({"summary": summary, "security": [{"bearer": []}], "responses": responses});
    if let Some(b) = body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{b}")}}}});
    }
    o
}

/// Returns a paged list operation: `params` (filters) plus `limit` and `cursor`, the JSON array and the next-page
/// headers.
fn paged(summary: &str, item: &str, cursor: &str, mut params: Vec<Value>) -> Value {
    params.push(json!({"name": "limit", "in": "query", "description": "items per page (422 beyond the maximum)",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT, "default": DEFAULT_PAGE_LIMIT}}));
    params.push(json!({"name": "cursor", "in": "query", "description": cursor, "schema": {"type": "string"}}));
    let mut o = op(summary, None, "200", list(item));
    o["parameters"] = Value::Array(params);
    o["responses"]["200"]["headers"] = json!({
        "Link": {"description": "`<path?query>; rel=\"next\"`: the next page; absent on the last", "schema": {"type": "string"}},
        "X-Next-Cursor": {"description": "the cursor of the next page; absent on the last", "schema": {"type": "string"}}
    });
    o
}

/// Returns a query parameter of `schema`.
fn param(name: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "schema": schema})
}

/// Returns the JSON Schema of a string of at most `max` bytes (`maxLength` counts characters, so it is a bound
/// that the byte limit in the description tightens).
fn bytes(max: usize) -> Value {
    json!({"type": "string", "maxLength": max, "description": format!("at most {max} bytes (UTF-8), no NUL")})
}

/// Returns the `JobSubmit` schema with every limit of `spillway_api::limits`.
fn job_submit() -> Value {
    let secs = |min_key: &str, min: f64, max: f64, desc: &str| {
        let mut v = json!({"type": "number", "maximum": max, "description": desc});
        v[min_key] = json!(min);
        v
    };
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["tier", "gpus", "argv"],
        "description": format!("Limits (422 naming the field): argv {MAX_ARGV} entries, each {MAX_ARG_BYTES} bytes, {MAX_ARGV_BYTES} in all; \
            env {MAX_ENV} entries, names [A-Za-z_][A-Za-z0-9_]* of {MAX_ENV_KEY_BYTES} bytes, values {MAX_ENV_VALUE_BYTES}, {MAX_ENV_BYTES} in all; \
            no NUL in any string; the body at most {MAX_BODY_BYTES} bytes (413)."),
        "properties": {
            "name": bytes(MAX_NAME_BYTES),
            "tier": bytes(MAX_LABEL_BYTES),
            "team": bytes(MAX_LABEL_BYTES),
            "gpus": {"type": "integer", "minimum": 1, "maximum": MAX_GPUS_PER_WORKER},
            "workers": {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS},
            "max_workers": {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS,
                            "description": "an elastic job's most workers (another name for workers)"},
            "min_workers": {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS,
                            "description": "an elastic job's fewest workers; absent: rigid"},
            "argv": {"type": "array", "minItems": 1, "maxItems": MAX_ARGV, "items": bytes(MAX_ARG_BYTES),
                     "description": format!("program and arguments, {MAX_ARGV_BYTES} bytes in all")},
            "env": {"type": "object", "maxProperties": MAX_ENV, "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": MAX_ENV_KEY_BYTES},
                    "additionalProperties": bytes(MAX_ENV_VALUE_BYTES), "description": format!("names and values {MAX_ENV_BYTES} bytes in all")},
            "workdir": bytes(MAX_WORKDIR_BYTES),
            "gpu_model": bytes(MAX_LABEL_BYTES),
            "interruptible": {"type": "boolean"},
            "checkpoint_interval_s": secs("minimum", MIN_CHECKPOINT_INTERVAL_S, MAX_CHECKPOINT_INTERVAL_S, "seconds, one year at most"),
            "deadline_s": secs("exclusiveMinimum", 0.0, MAX_DURATION_S, "seconds from submission, ten years at most"),
            "expected_duration_s": secs("exclusiveMinimum", 0.0, MAX_DURATION_S, "seconds, ten years at most")
        }
    })
}

/// Returns the limits by name (`x-spillway-limits` of the document), for clients that check before sending.
fn limits() -> Value {
    json!({
        "MAX_BODY_BYTES": MAX_BODY_BYTES, "MAX_NAME_BYTES": MAX_NAME_BYTES, "MAX_LABEL_BYTES": MAX_LABEL_BYTES,
        "MAX_WORKDIR_BYTES": MAX_WORKDIR_BYTES, "MAX_ARGV": MAX_ARGV, "MAX_ARG_BYTES": MAX_ARG_BYTES, "MAX_ARGV_BYTES": MAX_ARGV_BYTES,
        "MAX_ENV": MAX_ENV, "MAX_ENV_KEY_BYTES": MAX_ENV_KEY_BYTES, "MAX_ENV_VALUE_BYTES": MAX_ENV_VALUE_BYTES, "MAX_ENV_BYTES": MAX_ENV_BYTES,
        "MAX_GPUS_PER_WORKER": MAX_GPUS_PER_WORKER, "MAX_WORKERS": MAX_WORKERS,
        "MIN_CHECKPOINT_INTERVAL_S": MIN_CHECKPOINT_INTERVAL_S, "MAX_CHECKPOINT_INTERVAL_S": MAX_CHECKPOINT_INTERVAL_S,
        "MAX_DURATION_S": MAX_DURATION_S, "DEFAULT_PAGE_LIMIT": DEFAULT_PAGE_LIMIT, "MAX_PAGE_LIMIT": MAX_PAGE_LIMIT,
        "MAX_PAGE_BYTES": MAX_PAGE_BYTES,
        "HEADER_READ_TIMEOUT_S": crate::http::HEADER_READ_TIMEOUT.as_secs(), "MAX_HEADER_BYTES": crate::http::MAX_HEADER_BYTES, "BODY_READ_TIMEOUT_S": crate::http::BODY_READ_TIMEOUT.as_secs(),
        "MAX_CONNECTIONS": crate::http::MAX_CONNECTIONS
    })
}

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn list(name: &str) -> Value {
    json!({"type": "array", "items": r(name)})
}

fn id_param(name: &str, kind: &str) -> Value {
    json!([{"name": name, "in": "path", "required": true, "schema": {"type": kind}}])
}

/// Returns the document.
pub fn document() -> Value {
    let obj = |props: &[(&str, &str)], required: &[&str]| {
        let p: serde_json::Map<String, Value> =
            props.iter().map(|(k, t)| (k.to_string(), json!({"type": t}))).collect();
        json!({"type": "object", "properties": p, "required": required})
    };
    let states: Vec<&str> = crate::views::JOB_STATES.iter().map(|s| crate::views::job_state(*s)).collect();
    let kinds: Vec<&str> = crate::views::DECISION_KINDS.iter().map(|k| crate::views::decision_kind(*k)).collect();
    let string = json!({"type": "string"});
    let jobs_params = vec![
        param("state", json!({"type": "string", "enum": states})),
        param("team", string.clone()),
        param("tier", string.clone()),
    ];
    let event_params = vec![
        param("job", json!({"type": "integer"})),
        param("node", json!({"type": "integer"})),
        param("pool", string.clone()),
        param("kind", json!({"type": "string", "enum": kinds})),
    ];
    let mut cost = op("Cost so far by team, tier, pool and market (admin)", None, "200", r("CostView"));
    cost["parameters"] = json!([
        param("since", json!({"type": "number", "minimum": 0})),
        param("until", json!({"type": "number", "minimum": 0}))
    ]);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Spillway", "version": env!("CARGO_PKG_VERSION"), "description": "Elastic GPU capacity manager: jobs, nodes, pools, decisions and cost. \
            Every error is an ErrorBody; request headers must arrive within 10 s and bodies within 10 s more (408)."},
        "x-spillway-limits": limits(),
        "paths": {
            "/v1/jobs": {
                "post": op("Submit a job", Some("JobSubmit"), "201", r("JobView")),
                "get": paged("List jobs, newest first (a team token sees its team's); a page of large jobs may end before `limit`", "JobView", "opaque: the X-Next-Cursor of the previous page", jobs_params)
            },
            "/v1/jobs/{id}": {"parameters": id_param("id", "integer"), "get": op("Get a job", None, "200", r("JobView"))},
            "/v1/jobs/{id}/cancel": {"parameters": id_param("id", "integer"), "post": op("Cancel a job", None, "200", r("JobView"))},
            "/v1/jobs/{id}/logs": {"parameters": id_param("id", "integer"), "get": op("A job's output (text)", None, "200", json!({"type": "string"}))},
            "/v1/nodes": {"get": op("List nodes", None, "200", list("NodeView"))},
            "/v1/nodes/{id}/interrupt": {"parameters": id_param("id", "integer"), "post": op("Send a spot interruption notice (admin)", None, "200", r("NodeView"))},
            "/v1/nodes/{id}/protect": {"parameters": id_param("id", "integer"), "post": op("Protect a node from scale-in (admin)", Some("Protect"), "200", r("NodeView"))},
            "/v1/pools": {"get": op("List pools", None, "200", list("PoolView"))},
            "/v1/pools/{name}/scale": {"parameters": id_param("name", "string"), "post": op("Set a pool's min/max nodes (admin)", Some("PoolScale"), "200", r("PoolView"))},
            "/v1/pools/{name}/protect": {"parameters": id_param("name", "string"), "post": op("Protect a pool from scale-in (admin)", Some("Protect"), "200", r("PoolView"))},
            "/v1/pools/{name}/what-if": {"parameters": id_param("name", "string"), "get": op("What a pool would launch now under another max (?max_nodes=N&ignore_cooldown=true); changes nothing (admin)", None, "200", r("WhatIfView"))},
            "/v1/events": {"get": paged("The decision log, oldest first (admin); at most one of job, node, pool", "EventView",
                "the X-Next-Cursor of the previous page, or any sequence number N: the page starts at the first kept event with seq >= N", event_params)},
            "/v1/cost": {"get": cost},
            "/v1/explain/job/{id}": {"parameters": id_param("id", "integer"), "get": op("Why a job waits, ran where it ran, or ended", None, "200", r("ExplainView"))},
            "/v1/explain/pool/{name}": {"parameters": id_param("name", "string"), "get": op("Why a pool has its size and what would change it", None, "200", r("ExplainView"))},
            "/v1/budgets": {"get": op("Each team budget's spend in its current UTC day or month (admin)", None, "200", list("BudgetView"))},
            "/v1/agent/heartbeat": {"post": op("Agent heartbeat (node token)", Some("Heartbeat"), "200", json!({"type": "object"}))},
            "/v1/slurm/resume": {"post": op("Slurm's ResumeProgram: buy a node for each name of a hostlist (admin; 422 for a malformed list or an unknown name, nothing done)", Some("SlurmRequest"), "200", r("SlurmReply"))},
            "/v1/slurm/suspend": {"post": op("Slurm's SuspendProgram: release the node of each name of a hostlist (admin)", Some("SlurmRequest"), "200", r("SlurmReply"))},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "Readiness", "responses": {"200": {"description": "ready"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition"}}}}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "error", "content": {"application/json": {"schema": r("ErrorBody")}}}},
            "schemas": {
                "JobSubmit": job_submit(),
                "JobView": obj(&[("id", "integer"), ("name", "string"), ("tier", "string"), ("team", "string"), ("state", "string"), ("attempt", "integer"),
                                 ("gpus", "integer"), ("workers", "integer"), ("min_workers", "integer"), ("submitted_at", "number"), ("pending_reason", "string"),
                                 ("exit_code", "integer"), ("exit_signal", "integer"), ("attempts", "array"), ("cost_usd", "number")], &["id", "state"]),
                "NodeView": obj(&[("id", "integer"), ("pool", "string"), ("instance_type", "string"), ("market", "string"), ("state", "string"),
                                  ("gpus", "integer"), ("free_gpus", "integer"), ("protected", "boolean"), ("slurm_name", "string")], &["id", "state"]),
                "SlurmRequest": obj(&[("hosts", "string")], &["hosts"]),
                "SlurmReply": obj(&[("nodes", "array")], &["nodes"]),
                "PoolView": obj(&[("name", "string"), ("market", "string"), ("nodes", "integer"), ("ready_nodes", "integer"), ("min_nodes", "integer"),
                                  ("max_nodes", "integer"), ("gpus", "integer"), ("busy_gpus", "integer"), ("protected", "boolean")], &["name"]),
                "WhatIfView": obj(&[("pool", "string"), ("max_nodes", "integer"), ("launches", "array"), ("not_grown", "string"), ("not_grown_detail", "string"), ("jobs", "integer"), ("may_use", "integer")], &["pool", "launches"]),
                "PoolScale": obj(&[("min_nodes", "integer"), ("max_nodes", "integer")], &[]),
                "Protect": obj(&[("protected", "boolean")], &["protected"]),
                "EventView": obj(&[("seq", "integer"), ("at", "number"), ("kind", "string"), ("subject", "string"), ("reason", "string"), ("detail", "string")], &["kind"]),
                "ExplainView": obj(&[("subject", "string"), ("reasons", "array")], &["subject", "reasons"]),
                "BudgetView": obj(&[("team", "string"), ("period", "string"), ("period_start", "number"), ("limit_usd", "number"), ("spent_usd", "number"), ("hard_cap", "boolean"), ("capping", "boolean")], &["team", "period", "limit_usd", "spent_usd"]),
                "CostView": obj(&[("total_usd", "number"), ("idle_usd", "number"), ("by_team", "object"), ("by_tier", "object"), ("by_pool", "object"), ("by_market", "object")], &["total_usd"]),
                "Heartbeat": obj(&[("node", "integer"), ("running", "array"), ("exited", "array"), ("checkpoints", "array"), ("gpu_utilization", "number")], &["node"]),
                "ErrorBody": obj(&[("error", "string"), ("field", "string")], &["error"])
            }
        }
    })
}
