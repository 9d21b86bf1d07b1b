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
//! The scope must end in `/.default`. Failures use the OAuth error shape (`error`, `error_description` with
//! an AADSTS code), not the ARM one. Issued tokens are opaque strings the ARM endpoints then require.

use std::collections::BTreeMap;

use serde_json::json;

use super::state::Shared;
use super::wire::{ArmRequest, ArmResponse};

/// Entra ID's federated assertion type (RFC 7521).
const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The lifetime Entra ID reports for app tokens.
const EXPIRES_IN_SECS: u64 = 3599;

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
        !assertion.is_empty()
            && shared.config.federated_token.as_deref().is_none_or(|expected| expected == assertion)
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
    ArmResponse::json(
        200,
        json!({
            "token_type": "Bearer",
            "expires_in": EXPIRES_IN_SECS,
            "ext_expires_in": EXPIRES_IN_SECS,
            "access_token": token,
        }),
    )
}

/// A new token the ARM endpoints accept.
pub fn mint(shared: &Shared) -> String {
    let mut state = shared.lock();
    let n = state.next_id();
    let token = format!("fake-arm.{n}.{}", super::wire::uuid_from(n, 0x70c3));
    state.tokens.insert(token.clone());
    token
}

fn oauth_error(status: u16, error: &str, description: &str) -> ArmResponse {
    ArmResponse::json(status, json!({ "error": error, "error_description": description }))
}
