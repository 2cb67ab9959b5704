//! The OpenAPI 3.1 document of the API (`GET /v1/openapi.json`), written out by hand from the routes in `api.rs`
//! and the wire types in `spillway-api`.

use serde_json::{Value, json};

/// Returns one operation: summary, whether it takes a JSON body, and its success status.
fn op(summary: &str, body: Option<&str>, ok: &str, schema: Value) -> Value {
    let mut o = json!({
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {
            ok: {"description": "success", "content": {"application/json": {"schema": schema}}},
            "400": {"$ref": "#/components/responses/Error"},
            "401": {"$ref": "#/components/responses/Error"},
            "403": {"$ref": "#/components/responses/Error"},
            "404": {"$ref": "#/components/responses/Error"},
            "422": {"$ref": "#/components/responses/Error"}
        }
    });
    if let Some(b) = body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{b}")}}}});
    }
    o
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
        let p: serde_json::Map<String, Value> = props.iter().map(|(k, t)| (k.to_string(), json!({"type": t}))).collect();
        json!({"type": "object", "properties": p, "required": required})
    };
    let mut job_submit = obj(
        &[("name", "string"), ("tier", "string"), ("team", "string"), ("gpus", "integer"), ("workers", "integer"), ("workdir", "string"),
          ("gpu_model", "string"), ("interruptible", "boolean"), ("checkpoint_interval_s", "number"), ("deadline_s", "number"),
          ("expected_duration_s", "number")],
        &["tier", "gpus", "argv"],
    );
    job_submit["properties"]["argv"] = json!({"type": "array", "items": {"type": "string"}, "minItems": 1});
    job_submit["properties"]["env"] = json!({"type": "object", "additionalProperties": {"type": "string"}});
    job_submit["additionalProperties"] = json!(false);
    let query_params: Vec<Value> =
        ["state", "team", "tier", "limit"].iter().map(|n| json!({"name": n, "in": "query", "schema": {"type": "string"}})).collect();
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Spillway", "version": env!("CARGO_PKG_VERSION"), "description": "Elastic GPU capacity manager: jobs, nodes, pools, decisions and cost."},
        "paths": {
            "/v1/jobs": {
                "post": op("Submit a job", Some("JobSubmit"), "201", r("JobView")),
                "get": {
                    "summary": "List jobs, newest first (a team token sees its team's)",
                    "security": [{"bearer": []}],
                    "parameters": query_params,
                    "responses": {"200": {"description": "jobs", "content": {"application/json": {"schema": list("JobView")}}}}
                }
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
            "/v1/events": {"get": op("The decision log (admin); filters job, node, pool, kind, limit", None, "200", list("EventView"))},
            "/v1/cost": {"get": op("Cost so far by team, tier, pool and market (admin)", None, "200", r("CostView"))},
            "/v1/agent/heartbeat": {"post": op("Agent heartbeat (node token)", Some("Heartbeat"), "200", json!({"type": "object"}))},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "Readiness", "responses": {"200": {"description": "ready"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition"}}}}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "error", "content": {"application/json": {"schema": r("ErrorBody")}}}},
            "schemas": {
                "JobSubmit": job_submit,
                "JobView": obj(&[("id", "integer"), ("name", "string"), ("tier", "string"), ("team", "string"), ("state", "string"), ("attempt", "integer"),
                                 ("gpus", "integer"), ("workers", "integer"), ("submitted_at", "number"), ("pending_reason", "string")], &["id", "state"]),
                "NodeView": obj(&[("id", "integer"), ("pool", "string"), ("instance_type", "string"), ("market", "string"), ("state", "string"),
                                  ("gpus", "integer"), ("free_gpus", "integer"), ("protected", "boolean")], &["id", "state"]),
                "PoolView": obj(&[("name", "string"), ("market", "string"), ("nodes", "integer"), ("ready_nodes", "integer"), ("min_nodes", "integer"),
                                  ("max_nodes", "integer"), ("gpus", "integer"), ("busy_gpus", "integer"), ("protected", "boolean")], &["name"]),
                "PoolScale": obj(&[("min_nodes", "integer"), ("max_nodes", "integer")], &[]),
                "Protect": obj(&[("protected", "boolean")], &["protected"]),
                "EventView": obj(&[("seq", "integer"), ("at", "number"), ("kind", "string"), ("subject", "string"), ("reason", "string"), ("detail", "string")], &["kind"]),
                "CostView": obj(&[("total_usd", "number"), ("idle_usd", "number"), ("by_team", "object"), ("by_tier", "object"), ("by_pool", "object"), ("by_market", "object")], &["total_usd"]),
                "Heartbeat": obj(&[("node", "integer"), ("running", "array"), ("exited", "array"), ("checkpoints", "array"), ("gpu_utilization", "number")], &["node"]),
                "ErrorBody": obj(&[("error", "string"), ("field", "string")], &["error"])
            }
        }
    })
}
