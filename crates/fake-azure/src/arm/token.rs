//! The Microsoft Entra ID token endpoint, `POST /<tenant>/oauth2/v2.0/token`, so azure_identity's
//! credential flows run for real against the fake.
//!
//! Two client-credentials grants are accepted, as Entra ID does:
//! - client secret: `grant_type=client_credentials`, `client_id`, `client_secret`, `scope`
//!   (azure_identity 0.21 `ClientSecretCredential::new(http, authority_host, tenant, id, secret)`);
//! - federated assertion (workload identity): `client_assertion_type=
//!   urn:ietf:params:oauth:client-assertion-type:jwt-bearer`, `client_assertion=<service account token>`
//!   (`WorkloadIdentityCredential::new(http, authority_host, tenant, id, token)`).
//!
//! The scope must end in `/.default`. A federated assertion must be a JWT whose `exp` has not passed
//! (Entra ID: AADSTS700024), which is why a credential that keeps the service-account token it read
//! once fails after the kubelet rotates it. Failures use the OAuth error shape (`error`,
//! `error_description` with an AADSTS code), not the ARM one. Issued tokens are opaque strings the ARM
//! endpoints then require until [`FakeArmConfig::token_lifetime`](super::FakeArmConfig) has passed.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::state::Shared;
use super::wire::{ArmRequest, ArmResponse};

/// Entra ID's federated assertion type (RFC 7521).
const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A projected service-account token as the kubelet writes it for workload identity: a JWT for the
/// `api://AzureADTokenExchange` audience that expires `valid_for` from now. The signature is not
/// checked here (Entra ID checks it against the cluster's OIDC issuer).
pub fn service_account_token(subject: &str, valid_for: Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let header = json!({ "alg": "RS256", "typ": "JWT" });
    let claims = json!({
        "aud": ["api://AzureADTokenExchange"],
        "iss": "https://oidc.fake.local/",
        "sub": subject,
        "iat": now.as_secs(),
        "exp": (now + valid_for).as_secs(),
    });
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.{}", part(&header), part(&claims), URL_SAFE_NO_PAD.encode(b"unchecked-signature"))
}

/// Why a federated assertion is refused, as Entra ID words it; None when it is a JWT still valid.
fn assertion_problem(assertion: &str) -> Option<&'static str> {
    let claims = assertion
        .split('.')
        .nth(1)
        .and_then(|payload| URL_SAFE_NO_PAD.decode(payload).ok())
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let Some(exp) = claims.as_ref().and_then(|c| c.get("exp")).and_then(Value::as_u64) else {
        return Some("AADSTS50027: JWT token is invalid or malformed.");
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    (exp <= now).then_some("AADSTS700024: Client assertion is not within its valid time range.")
}

pub fn issue(shared: &Shared, request: &ArmRequest, tenant: &str) -> ArmResponse {
    if tenant != shared.config.tenant_id {
        return oauth_error(
            400,
            "invalid_request",
            &format!("AADSTS90002: Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID."),
        );
    }
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(&request.body).into_owned().collect();
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if field("grant_type") != "client_credentials" {
        return oauth_error(
            400,
            "unsupported_grant_type",
            "AADSTS70003: The app requested an unsupported grant type.",
        );
    }
    if !field("scope").split(' ').any(|scope| scope.ends_with("/.default")) {
        return oauth_error(
            400,
            "invalid_scope",
            "AADSTS1002012: The provided value for scope is not valid. Client credential flows must have a scope \
             value with /.default suffixed to the resource identifier (application ID URI).",
        );
    }
    let client_id = field("client_id");
    let authenticated = if !field("client_assertion_type").is_empty() {
        if field("client_assertion_type") != JWT_BEARER_ASSERTION {
            return oauth_error(400, "invalid_request", "AADSTS50027: Invalid client_assertion_type.");
        }
        let assertion = field("client_assertion");
        if let Some(problem) = assertion_problem(assertion) {
            return oauth_error(400, "invalid_client", problem);
        }
        shared.config.federated_token.as_deref().is_none_or(|expected| expected == assertion)
    } else {
        let secret = field("client_secret");
        shared.config.client_secrets.iter().any(|(id, s)| id == client_id && s == secret)
    };
    if !authenticated {
        return oauth_error(
            401,
            "invalid_client",
            &format!(
                "AADSTS7000215: Invalid client secret or assertion provided for application '{client_id}'."
            ),
        );
    }
    let token = mint(shared);
    let expires_in = shared.config.token_lifetime.as_secs().max(1);
    ArmResponse::json(
        200,
        json!({
            "token_type": "Bearer",
            "expires_in": expires_in,
            "ext_expires_in": expires_in,
            "access_token": token,
        }),
    )
}

/// The instance metadata service's managed identity endpoint, `GET /metadata/identity/oauth2/token`
/// (api-version 2018-02-01): it requires the `Metadata: true` header and a `resource`, serves the
/// system-assigned identity or the user-assigned one `client_id` names if the VM has it, and answers
/// with string fields (`expires_on` in Unix seconds), as IMDS does.
pub fn imds(shared: &Shared, request: &ArmRequest) -> ArmResponse {
    let refuse = |description: &str| {
        ArmResponse::json(400, json!({ "error": "invalid_request", "error_description": description }))
    };
    let metadata = request.headers.get("metadata").and_then(|v| v.to_str().ok());
    if metadata != Some("true") {
        return refuse("Required metadata header not specified");
    }
    if !request.query.contains_key("api-version") {
        return refuse("Required query variable 'api-version' is missing");
    }
    let Some(resource) = request.query.get("resource").filter(|r| !r.is_empty()) else {
        return refuse("Required audience parameter not specified");
    };
    if let Some(client_id) = request.query.get("client_id") {
        if !shared.config.managed_identities.contains(client_id) {
            return refuse("Identity not found");
        }
    }
    let token = mint(shared);
    let lifetime = shared.config.token_lifetime.as_secs().max(1);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    ArmResponse::json(
        200,
        json!({
            "access_token": token,
            "expires_in": lifetime.to_string(),
            "expires_on": (now + lifetime).to_string(),
            "not_before": now.to_string(),
            "resource": resource,
            "token_type": "Bearer",
        }),
    )
}

/// A new token the ARM endpoints accept.
pub fn mint(shared: &Shared) -> String {
    let mut state = shared.lock();
    let n = state.next_id();
    let token = format!("fake-arm.{n}.{}", super::wire::uuid_from(n, 0x70c3));
    state.tokens.insert(token.clone(), Instant::now() + shared.config.token_lifetime);
    token
}

fn oauth_error(status: u16, error: &str, description: &str) -> ArmResponse {
    ArmResponse::json(status, json!({ "error": error, "error_description": description }))
}
