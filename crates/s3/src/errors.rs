//! S3 errors as backend errors: which service codes are permanent, and a
//! one-line message for a failed SDK call.

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use paralog_backend::{BackendError, ErrorKind};

/// Service error codes that the same request will get again however often
/// it is retried: a missing bucket, refused access, wrong credentials or
/// region, a request the server does not support. Everything else
/// (throttling, 5xx, timeouts, resets, a previous object that changed under
/// the upload, expired temporary credentials) is retryable.
const PERMANENT_CODES: &[&str] = &[
    "NoSuchBucket",
    "InvalidBucketName",
    "AccessDenied",
    "AllAccessDisabled",
    "AccountProblem",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AuthorizationHeaderMalformed",
    "InvalidRegion",
    "PermanentRedirect",
    "NotImplemented",
    "MethodNotAllowed",
    "KeyTooLongError",
    "MetadataTooLarge",
    "EntityTooLarge",
    "InvalidStorageClass",
    "InvalidObjectState",
];

/// Whether an S3 error can go away by retrying. A response without an
/// error code (HEAD has no body) is judged by its status: 403 is access
/// denied, 301 a bucket in another region.
pub(crate) fn classify(code: Option<&str>, status: Option<u16>) -> ErrorKind {
    match (code, status) {
        (Some(c), _) if PERMANENT_CODES.contains(&c) => ErrorKind::Permanent,
        (None, Some(301 | 403)) => ErrorKind::Permanent,
        _ => ErrorKind::Retryable,
    }
}

/// A failed SDK call as a backend error: retryable or permanent, with a
/// one-line message (the service's code and message, never a raw response
/// dump) and the bucket and key it concerned.
pub(crate) fn s3_error<E>(
    bucket: &str,
    key: &str,
    op: &'static str,
    e: &SdkError<E, HttpResponse>,
) -> BackendError
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let kind = classify(e.code(), status);
    let mut message = match (e.code(), e.message(), status) {
        (Some(code), Some(msg), _) => format!("{code}: {msg}"),
        (Some(code), None, _) => code.to_owned(),
        (None, _, Some(403)) => "HTTP 403 Forbidden (access denied)".to_owned(),
        (None, _, Some(301)) => "HTTP 301 (the bucket is in another region)".to_owned(),
        (None, _, Some(s)) => format!("HTTP {s}"),
        _ => chain(e),
    };
    if kind == ErrorKind::Permanent {
        message.push_str(&format!(
            " (not retried: check the bucket {bucket}, the endpoint and the credentials)"
        ));
    }
    BackendError {
        kind,
        target: format!("s3://{bucket}/{key}"),
        op,
        message,
    }
}

/// An error and its sources on one line (`a: b: c`), without the debug
/// dump of `DisplayErrorContext`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
