//! Interruption events the production way: EventBridge rules send EC2's "Spot Instance Interruption Warning",
//! "Instance Rebalance Recommendation" and "Instance State-change Notification" events to an SQS queue, which
//! the daemon polls. [`parse`] reads one message body (the EventBridge envelope).

use aws_sdk_ec2::primitives::{DateTime, DateTimeFormat};
use spillway_providers::{Notice, NoticeKind};

/// How long AWS gives between a spot interruption warning and the reclaim.
const SPOT_WARNING_MS: i64 = 120_000;

/// What a message body says: a notice, nothing for us (another event type or a state we do not act on), or
/// garbage (the error names what is wrong).
pub fn parse(body: &str) -> Result<Option<Notice>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let kind = v.get("detail-type").and_then(|d| d.as_str()).ok_or("no \"detail-type\"")?;
    let detail = v.get("detail").ok_or("no \"detail\"")?;
    let instance = || {
        detail
            .get("instance-id")
            .and_then(|i| i.as_str())
            .filter(|i| is_instance_id(i))
            .map(str::to_string)
            .ok_or_else(|| format!("{kind}: no valid \"detail.instance-id\" (i- and 8 to 17 hex digits)"))
    };
    let kind = match kind {
        "EC2 Spot Instance Interruption Warning" => {
            let at = v.get("time").and_then(|t| t.as_str()).map(|t| {
                DateTime::from_str(t, DateTimeFormat::DateTime).map_err(|e| format!("{kind}: time {t:?}: {e}"))
            });
            let deadline_ms = match at {
                Some(t) => Some(t?.to_millis().map_err(|e| format!("{kind}: time: {e}"))? + SPOT_WARNING_MS),
                None => None,
            };
            NoticeKind::Interruption { deadline_ms }
        }
        "EC2 Instance Rebalance Recommendation" => NoticeKind::Rebalance,
        "EC2 Instance State-change Notification" => {
            let state = detail.get("state").and_then(|s| s.as_str()).ok_or(format!("{kind}: no \"detail.state\""))?;
            if !matches!(state, "stopping" | "stopped" | "shutting-down" | "terminated") {
                return Ok(None);
            }
            NoticeKind::Gone { state: state.to_string() }
        }
        _ => return Ok(None),
    };
    Ok(Some(Notice { instance_id: instance()?, kind }))
}

/// Returns whether `id` looks like an EC2 instance id (`i-` and 8 or 17 hex digits; up to 17 accepted).
fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|h| (8..=17).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str, detail: &str) -> String {
        format!(
            r#"{{"version":"0","id":"1","detail-type":"{kind}","source":"aws.ec2","time":"2026-12-01T10:00:00Z","region":"us-east-1","resources":[],"detail":{detail}}}"#
        )
    }

    #[test]
    fn a_spot_warning_is_an_interruption_two_minutes_after_its_time() {
        let n = parse(&body(
            "EC2 Spot Instance Interruption Warning",
            r#"{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(n.instance_id, "i-0123456789abcdef0");
        let at = DateTime::from_str("2026-12-01T10:02:00Z", DateTimeFormat::DateTime).unwrap().to_millis().unwrap();
        assert_eq!(n.kind, NoticeKind::Interruption { deadline_ms: Some(at) });
    }

    #[test]
    fn rebalance_and_leaving_states_are_notices_other_events_are_not() {
        let r = parse(&body("EC2 Instance Rebalance Recommendation", r#"{"instance-id":"i-0000000000000002"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(r.kind, NoticeKind::Rebalance);
        let g = parse(&body(
            "EC2 Instance State-change Notification",
            r#"{"instance-id":"i-00000003","state":"terminated"}"#,
        ));
        assert_eq!(g.unwrap().unwrap().kind, NoticeKind::Gone { state: "terminated".into() });
        let running =
            parse(&body("EC2 Instance State-change Notification", r#"{"instance-id":"i-00000003","state":"running"}"#));
        assert_eq!(running.unwrap(), None);
        assert_eq!(parse(&body("AWS API Call via CloudTrail", "{}")).unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error_that_says_what_is_missing() {
        assert!(parse("nope").unwrap_err().contains("not JSON"));
        assert!(parse("{}").unwrap_err().contains("detail-type"));
        let e = parse(&body("EC2 Instance Rebalance Recommendation", "{}")).unwrap_err();
        assert!(e.contains("instance-id"), "{e}");
        let huge = format!(r#"{{"instance-id":"i-{}"}}"#, "a".repeat(100_000));
        assert!(parse(&body("EC2 Instance Rebalance Recommendation", &huge)).unwrap_err().contains("instance-id"));
        let e = parse(
            &body("EC2 Spot Instance Interruption Warning", r#"{"instance-id":"i-0123456789abcdef0"}"#)
                .replace("2026-12-01T10:00:00Z", "soon"),
        )
        .unwrap_err();
        assert!(e.contains("time"), "{e}");
    }
}
