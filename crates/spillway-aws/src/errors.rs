//! AWS errors mapped to the provider's typed errors, so the engine reacts per kind: no capacity for an offering
//! backs off that offering only; a quota stops buying; everything else may work on a retry.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use spillway_providers::ProviderError;

/// Error codes that mean "no capacity for this offering now" (the engine backs it off and falls back).
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "UnfulfillableCapacity",
    "SpotMaxPriceTooLow",
    "InsufficientFreeAddressesInSubnet",
];
/// Error codes that mean an account limit was reached.
const QUOTA: &[&str] =
    &["MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded", "MaxFleetCountExceeded"];
/// Error codes that mean the credentials or permissions are wrong: no retry will help.
const AUTH: &[&str] = &[
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "AccessDenied",
    "AccessDeniedException",
    "OptInRequired",
];

/// Returns the provider error for an EC2 error `code` (with its `message`) on an offering of `instance_type`.
pub fn classify_code(code: &str, message: &str, instance_type: &str) -> ProviderError {
    if CAPACITY.contains(&code) {
        ProviderError::InsufficientCapacity { instance_type: instance_type.to_string() }
    } else if QUOTA.contains(&code) {
        ProviderError::Quota(format!("{code}: {message}"))
    } else {
        ProviderError::Transient(format!("{code}: {message}"))
    }
}

/// Returns whether `code` is an authentication or permission error.
pub fn is_auth(code: &str) -> bool {
    AUTH.contains(&code)
}

/// Returns the provider error for a failed SDK call `what` (the SDK has already retried throttling with jittered
/// backoff). A reply that is not an AWS error (an HTML 500 page) says so with its HTTP status.
pub fn classify<E, R>(what: &str, e: &SdkError<E, R>, instance_type: &str) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e.code() {
        Some(code) if is_auth(code) => ProviderError::Transient(format!(
            "{what}: AWS refused the credentials or permissions: {}",
            DisplayErrorContext(e)
        )),
        Some(code) => {
            let message = e.message().unwrap_or("");
            match classify_code(code, message, instance_type) {
                ProviderError::Transient(m) => ProviderError::Transient(format!("{what}: {m}")),
                other => other,
            }
        }
        None => ProviderError::Transient(format!("{what}: {}", DisplayErrorContext(e))),
    }
}

/// Returns a short message for a failed startup check `what` (one line a user can act on): a refused credential
/// or permission says which call needs it, an AWS error gives its code and message, anything else the SDK's
/// whole context.
pub fn brief<E, R>(what: &str, e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e.code() {
        Some(code) if is_auth(code) => format!(
            "{what}: AWS refused the credentials or permissions ({code}): {} (the daemon needs ec2:{what})",
            e.message().unwrap_or("")
        ),
        Some(code) => format!("{what}: {code}: {}", e.message().unwrap_or("")),
        None => format!("{what}: {}", DisplayErrorContext(e)),
    }
}

/// Returns whether `e` says the instance does not exist.
pub fn is_not_found<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    matches!(e.code(), Some("InvalidInstanceID.NotFound" | "InvalidInstanceID.Malformed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_quota_and_other_codes_map_to_their_kinds() {
        assert_eq!(
            classify_code("InsufficientInstanceCapacity", "none left", "p4d.24xlarge"),
            ProviderError::InsufficientCapacity { instance_type: "p4d.24xlarge".into() }
        );
        assert!(matches!(classify_code("VcpuLimitExceeded", "x", "t"), ProviderError::Quota(m) if m.contains("Vcpu")));
        assert!(matches!(classify_code("MaxSpotInstanceCountExceeded", "", "t"), ProviderError::Quota(_)));
        assert!(matches!(classify_code("RequestLimitExceeded", "slow down", "t"), ProviderError::Transient(_)));
        assert!(is_auth("AuthFailure") && !is_auth("InsufficientInstanceCapacity"));
    }
}
