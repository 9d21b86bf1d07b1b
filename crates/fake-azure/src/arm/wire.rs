//! ARM wire-format primitives shared by every handler: the parsed request, the response with its ARM
//! error body, the api-versions each resource type accepts, resource IDs and the long-running-operation
//! headers.
//!
//! Error bodies always have the ARM shape `{"error":{"code":"...","message":"..."}}`; azure_core 0.21 reads
//! the code from that body (or from `x-ms-error-code`) into `ErrorKind::HttpResponse { status, error_code }`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

/// The api-versions the fake accepts per resource type. The SDK versions are the ones the production
/// clients send (azure_mgmt_compute 0.21 package-2024-07-01, azure_mgmt_network 0.21 package-2024-03);
/// the others are versions Azure also serves, so a client built on another SDK still works.
pub const COMPUTE_VM_API_VERSIONS: &[&str] = &[
    "2022-08-01",
    "2022-11-01",
    "2023-03-01",
    "2023-07-01",
    "2023-09-01",
    "2024-03-01",
    "2024-07-01",
    "2024-11-01",
];
pub const COMPUTE_SKU_API_VERSIONS: &[&str] = &["2019-04-01", "2021-07-01"];
/// Compute galleries (azure_mgmt_compute 0.21 package-2024-07-01 sends 2023-07-03 for them).
pub const COMPUTE_GALLERY_API_VERSIONS: &[&str] = &["2022-03-03", "2022-08-03", "2023-07-03", "2024-03-03"];
pub const NETWORK_API_VERSIONS: &[&str] =
    &["2023-04-01", "2023-05-01", "2023-09-01", "2023-11-01", "2024-01-01", "2024-03-01", "2024-05-01"];

/// An HTTP request reduced to what ARM routing needs.
#[derive(Debug, Clone)]
pub struct ArmRequest {
    pub method: hyper::Method,
    pub path: String,
    /// Decoded query pairs; ARM query parameter names are case-insensitive, so keys are lower-cased.
    pub query: BTreeMap<String, String>,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl ArmRequest {
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// The path split into segments, with empty segments dropped.
    pub fn segments(&self) -> Vec<&str> {
        self.path.split('/').filter(|s| !s.is_empty()).collect()
    }

    pub fn json_body(&self) -> Result<Value, ArmResponse> {
        serde_json::from_slice(&self.body).map_err(|err| {
            ArmResponse::error(
                400,
                "InvalidRequestContent",
                &format!("The request content was invalid: {err}"),
            )
        })
    }
}

/// A response about to be written: status, extra headers, optional JSON body.
#[derive(Debug, Clone)]
pub struct ArmResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

impl ArmResponse {
    pub fn json(status: u16, body: Value) -> ArmResponse {
        ArmResponse { status, headers: Vec::new(), body: Some(body) }
    }

    pub fn empty(status: u16) -> ArmResponse {
        ArmResponse { status, headers: Vec::new(), body: None }
    }

    pub fn error(status: u16, code: &str, message: &str) -> ArmResponse {
        ArmError::new(status, code, message).into_response()
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> ArmResponse {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The `Azure-AsyncOperation`, `Location` and `Retry-After` headers of an accepted long-running
    /// operation.
    pub fn with_lro_headers(self, lro: &LroUrls, retry_after: Duration) -> ArmResponse {
        self.with_header("Azure-AsyncOperation", lro.async_operation.clone())
            .with_header("Location", lro.location.clone())
            .with_retry_after(retry_after)
    }

    /// ARM sends whole seconds; a sub-second poll interval (tests) is also sent as `retry-after-ms`, which
    /// azure_core reads first.
    pub fn with_retry_after(self, retry_after: Duration) -> ArmResponse {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let this = self.with_header("Retry-After", secs.to_string());
        if retry_after.subsec_nanos() > 0 {
            this.with_header("retry-after-ms", retry_after.as_millis().to_string())
        } else {
            this
        }
    }
}

/// An ARM error: HTTP status plus the `code`/`message` pair of the body.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArmError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ArmError {
    pub fn new(status: u16, code: &str, message: &str) -> ArmError {
        ArmError { status, code: code.to_string(), message: message.to_string() }
    }

    /// The inner `{"code","message"}` object, as used in error bodies and operation-status documents.
    pub fn detail(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }

    pub fn into_response(self) -> ArmResponse {
        ArmResponse::json(self.status, json!({ "error": self.detail() }))
    }

    pub fn resource_not_found(resource_type: &str, name: &str, resource_group: &str) -> ArmError {
        ArmError::new(
            404,
            "ResourceNotFound",
            &format!(
                "The Resource '{resource_type}/{name}' under resource group '{resource_group}' was not found. \
                 For more details please go to https://aka.ms/ARMResourceNotFoundFix"
            ),
        )
    }
}

/// The two polling URLs ARM hands out for one operation.
#[derive(Debug, Clone)]
pub struct LroUrls {
    pub async_operation: String,
    pub location: String,
}

impl LroUrls {
    /// URLs in the shape Azure uses: `.../providers/<ns>/locations/<loc>/operations/<id>?api-version=...`;
    /// the Location variant adds `monitor=true`. The api-version is part of the URL because clients poll it
    /// verbatim.
    pub fn new(
        base_url: &str,
        subscription: &str,
        namespace: &str,
        location: &str,
        id: &str,
        api: &str,
    ) -> LroUrls {
        let op = format!("{base_url}/subscriptions/{subscription}/providers/{namespace}/locations/{location}/operations/{id}");
        LroUrls {
            async_operation: format!("{op}?api-version={api}"),
            location: format!("{op}?monitor=true&api-version={api}"),
        }
    }
}

/// `/subscriptions/<sub>/resourceGroups/<rg>/providers/<type>/<name>`.
pub fn resource_id(subscription: &str, resource_group: &str, resource_type: &str, name: &str) -> String {
    format!("/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/{resource_type}/{name}")
}

/// Checks the api-version query parameter against the versions a resource type accepts.
pub fn check_api_version(
    request: &ArmRequest,
    accepted: &[&str],
    resource_type: &str,
) -> Result<(), ArmResponse> {
    match request.query_param("api-version") {
        None | Some("") => Err(ArmResponse::error(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        )),
        Some(version) if accepted.contains(&version) => Ok(()),
        Some(version) => Err(ArmResponse::error(
            400,
            "InvalidApiVersionParameter",
            &format!(
                "The api-version '{version}' is invalid. The supported versions for resource type \
                 '{resource_type}' are '{}'.",
                accepted.join(", ")
            ),
        )),
    }
}

/// Azure compares names case-insensitively; state is keyed by the lower-cased name.
pub fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// A UUID-shaped identifier derived from a counter, unique within one fake (Azure's vmId, resourceGuid).
pub fn uuid_from(counter: u64, salt: u64) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (salt & 0xffff_ffff) as u32,
        (counter >> 32) & 0xffff,
        (counter >> 16) & 0xfff,
        counter & 0xfff,
        counter
    )
}

/// The current time in RFC 3339, as ARM writes `timeCreated` and operation `startTime`.
pub fn now_rfc3339() -> String {
    azure_core::date::to_rfc3339(&time::OffsetDateTime::now_utc())
}

/// One page of a list response: `{"value":[...],"nextLink":...}`. With a page size, `nextLink` is an
/// absolute URL carrying `$skiptoken`, which the SDK's pageable follows.
pub fn list_page(
    request: &ArmRequest,
    base_url: &str,
    items: Vec<Value>,
    page_size: Option<usize>,
) -> ArmResponse {
    let skip: usize = request.query_param("$skiptoken").and_then(|t| t.parse().ok()).unwrap_or(0);
    let Some(size) = page_size else {
        return ArmResponse::json(200, json!({ "value": items, "nextLink": null }));
    };
    let total = items.len();
    let page: Vec<Value> = items.into_iter().skip(skip).take(size).collect();
    let next_link = (skip + size < total).then(|| {
        let api = request.query_param("api-version").unwrap_or_default();
        format!("{base_url}{}?api-version={api}&$skiptoken={}", request.path, skip + size)
    });
    ArmResponse::json(200, json!({ "value": page, "nextLink": next_link }))
}
