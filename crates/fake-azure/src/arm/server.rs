//! The HTTP side: accepting loopback connections with hyper, turning requests into `ArmRequest`s, and the
//! routing order every ARM request goes through.
//!
//! Order, as ARM applies it: authentication (401) → subscription (404) → api-version (400) → injected
//! throttling / server errors (429 / 500) → resource group (404) → the resource provider handler.
//! `/_admin/*` and the token endpoint need no bearer token and no api-version.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::faults::{self, ArmRequestFault};
use super::state::{RequestRecord, Shared};
use super::wire::{
    self, ArmRequest, ArmResponse, COMPUTE_GALLERY_API_VERSIONS, COMPUTE_SKU_API_VERSIONS,
    COMPUTE_VM_API_VERSIONS, NETWORK_API_VERSIONS,
};
use super::{admin, compute, gallery, lb, network, operations, skus, subnets, token};

/// Serves until `shutdown` flips to true; open connections are dropped then.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    // A client hanging up mid-request is not the fake's problem.
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
            _ = shutdown.changed() => break,
        }
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|collected| collected.to_bytes().to_vec()).unwrap_or_default();
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let request = ArmRequest {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query,
        headers: parts.headers,
        body,
    };
    if !request.path.starts_with("/_admin") {
        let hang = faults::take_hang(&mut shared.lock().faults, &request.path);
        if let Some(hold) = hang {
            tokio::time::sleep(hold).await;
        }
    }
    let response = route(&shared, &request);
    if !request.path.starts_with("/_admin") {
        let mut state = shared.lock();
        state.requests.push(RequestRecord {
            method: request.method.to_string(),
            path: request.path.clone(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            status: response.status,
        });
    }
    Ok(to_hyper(response, &shared))
}

fn to_hyper(response: ArmResponse, shared: &Shared) -> Response<Full<Bytes>> {
    let request_id = wire::uuid_from(shared.lock().next_id(), 0x4e9);
    let mut builder = Response::builder()
        .status(response.status)
        .header("x-ms-request-id", &request_id)
        .header("x-ms-correlation-request-id", &request_id);
    for (name, value) in &response.headers {
        builder = builder.header(name, value);
    }
    let body = match response.body {
        Some(json) => {
            builder = builder.header("content-type", "application/json; charset=utf-8");
            Bytes::from(json.to_string())
        }
        None => Bytes::new(),
    };
    builder.body(Full::new(body)).unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// Which handler a path belongs to.
enum Route<'a> {
    Admin,
    Token {
        tenant: &'a str,
    },
    /// The instance metadata service's managed identity token endpoint.
    Imds,
    Arm {
        subscription: &'a str,
        target: ArmTarget<'a>,
    },
    Unknown,
}

enum ArmTarget<'a> {
    Skus,
    GalleryImageVersions { location: &'a str, gallery: &'a str, definition: &'a str },
    Subnet { rg: &'a str, vnet: &'a str, name: &'a str },
    Operation { namespace: &'a str, id: &'a str },
    Vms { rg: &'a str, name: Option<&'a str> },
    Nics { rg: &'a str, name: Option<&'a str> },
    LoadBalancers { rg: &'a str },
    SecurityGroups { rg: &'a str },
}

fn parse_route<'a>(segments: &[&'a str]) -> Route<'a> {
    let is = |s: &str, expected: &str| s.eq_ignore_ascii_case(expected);
    match segments {
        ["_admin", ..] => Route::Admin,
        ["metadata", "identity", "oauth2", "token"] => Route::Imds,
        [tenant, oauth, version, "token"] if is(oauth, "oauth2") && is(version, "v2.0") => {
            Route::Token { tenant }
        }
        ["subscriptions", sub, rest @ ..] | ["Subscriptions", sub, rest @ ..] => {
            let target = match rest {
                [p, ns, skus] if is(p, "providers") && is(ns, "Microsoft.Compute") && is(skus, "skus") => {
                    ArmTarget::Skus
                }
                [p, namespace, l, _, o, id]
                    if is(p, "providers") && is(l, "locations") && is(o, "operations") =>
                {
                    ArmTarget::Operation { namespace, id }
                }
                [p, ns, l, location, cg, gallery, i, definition, v]
                    if is(p, "providers")
                        && is(ns, "Microsoft.Compute")
                        && is(l, "locations")
                        && is(cg, "communityGalleries")
                        && is(i, "images")
                        && is(v, "versions") =>
                {
                    ArmTarget::GalleryImageVersions { location, gallery, definition }
                }
                [g, rg, p, ns, vnets, vnet, s, name]
                    if is(g, "resourceGroups")
                        && is(p, "providers")
                        && is(ns, "Microsoft.Network")
                        && is(vnets, "virtualNetworks")
                        && is(s, "subnets") =>
                {
                    ArmTarget::Subnet { rg, vnet, name }
                }
                [g, rg, p, ns, kind, name @ ..]
                    if is(g, "resourceGroups") && is(p, "providers") && name.len() <= 1 =>
                {
                    let name = name.first().copied();
                    if is(ns, "Microsoft.Compute") && is(kind, "virtualMachines") {
                        ArmTarget::Vms { rg, name }
                    } else if is(ns, "Microsoft.Network") && is(kind, "networkInterfaces") {
                        ArmTarget::Nics { rg, name }
                    } else if is(ns, "Microsoft.Network") && is(kind, "loadBalancers") && name.is_none() {
                        ArmTarget::LoadBalancers { rg }
                    } else if is(ns, "Microsoft.Network")
                        && is(kind, "networkSecurityGroups")
                        && name.is_none()
                    {
                        ArmTarget::SecurityGroups { rg }
                    } else {
                        return Route::Unknown;
                    }
                }
                _ => return Route::Unknown,
            };
            Route::Arm { subscription: sub, target }
        }
        _ => Route::Unknown,
    }
}

fn route(shared: &Arc<Shared>, request: &ArmRequest) -> ArmResponse {
    let segments = request.segments();
    match parse_route(&segments) {
        Route::Admin => admin::handle(shared, request, &segments[1..]),
        Route::Token { tenant } if request.method == Method::POST => token::issue(shared, request, tenant),
        Route::Imds if request.method == Method::GET => token::imds(shared, request),
        Route::Arm { subscription, target } => {
            arm_request(shared, request, subscription, target).unwrap_or_else(|refused| refused)
        }
        Route::Token { .. } | Route::Imds | Route::Unknown => ArmResponse::error(
            404,
            "InvalidResourceType",
            &format!("The resource type for path '{}' could not be found.", request.path),
        ),
    }
}

fn arm_request(
    shared: &Arc<Shared>,
    request: &ArmRequest,
    subscription: &str,
    target: ArmTarget<'_>,
) -> Result<ArmResponse, ArmResponse> {
    authenticate(shared, request)?;
    if subscription != shared.config.subscription_id {
        return Err(ArmResponse::error(
            404,
            "SubscriptionNotFound",
            &format!("The subscription '{subscription}' could not be found."),
        ));
    }
    let (versions, resource_type) = match &target {
        ArmTarget::Skus => (COMPUTE_SKU_API_VERSIONS, "Microsoft.Compute/skus"),
        ArmTarget::GalleryImageVersions { .. } => {
            (COMPUTE_GALLERY_API_VERSIONS, "Microsoft.Compute/locations/communityGalleries/images/versions")
        }
        ArmTarget::Subnet { .. } => (NETWORK_API_VERSIONS, subnets::SUBNET_TYPE),
        ArmTarget::Operation { namespace, .. } if namespace.eq_ignore_ascii_case("Microsoft.Network") => {
            (NETWORK_API_VERSIONS, "Microsoft.Network/locations/operations")
        }
        ArmTarget::Operation { .. } => (COMPUTE_VM_API_VERSIONS, "Microsoft.Compute/locations/operations"),
        ArmTarget::Vms { .. } => (COMPUTE_VM_API_VERSIONS, compute::VM_TYPE),
        ArmTarget::Nics { .. } => (NETWORK_API_VERSIONS, network::NIC_TYPE),
        ArmTarget::LoadBalancers { .. } => (NETWORK_API_VERSIONS, lb::LB_TYPE),
        ArmTarget::SecurityGroups { .. } => (NETWORK_API_VERSIONS, lb::NSG_TYPE),
    };
    wire::check_api_version(request, versions, resource_type)?;
    let fault = faults::take_request_fault(&mut shared.lock().faults, &request.path);
    match fault {
        Some(ArmRequestFault::Throttled { retry_after_secs }) => {
            return Err(ArmResponse::error(
                429,
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type - Write_1Min. \
                 For more information, see - https://aka.ms/srpthrottlinglimits",
            )
            .with_header("Retry-After", retry_after_secs.to_string()));
        }
        Some(ArmRequestFault::ServerError) => {
            return Err(ArmResponse::error(
                500,
                "InternalServerError",
                "Encountered internal server error. The tracking activity id is the x-ms-request-id header.",
            ));
        }
        None => {}
    }
    if let ArmTarget::Vms { rg, .. }
    | ArmTarget::Nics { rg, .. }
    | ArmTarget::LoadBalancers { rg }
    | ArmTarget::SecurityGroups { rg } = &target
    {
        if shared.has_resource_group(rg).is_none() {
            return Err(ArmResponse::error(
                404,
                "ResourceGroupNotFound",
                &format!("Resource group '{rg}' could not be found."),
            ));
        }
    }
    let method = &request.method;
    Ok(match target {
        ArmTarget::Skus if method == Method::GET => skus::list_skus(request),
        ArmTarget::GalleryImageVersions { location, gallery, definition } if method == Method::GET => {
            gallery::list_versions(shared, request, location, gallery, definition)
        }
        ArmTarget::Subnet { rg, vnet, name } if method == Method::GET => {
            subnets::get_subnet(shared, rg, vnet, name)
        }
        ArmTarget::Operation { id, .. } if method == Method::GET => operations::status(shared, request, id),
        ArmTarget::Vms { rg, name: None } if method == Method::GET => compute::list_vms(shared, request, rg),
        ArmTarget::Vms { rg, name: Some(name) } => match *method {
            Method::PUT => compute::put_vm(shared, request, rg, name),
            Method::PATCH => compute::patch_vm_tags(shared, request, rg, name),
            Method::GET => compute::get_vm(shared, request, rg, name),
            Method::DELETE => compute::delete_vm(shared, request, rg, name),
            _ => method_not_allowed(request),
        },
        ArmTarget::Nics { rg, name: None } if method == Method::GET => {
            network::list_nics(shared, request, rg)
        }
        ArmTarget::LoadBalancers { rg } if method == Method::GET => {
            lb::list_load_balancers(shared, request, rg)
        }
        ArmTarget::SecurityGroups { rg } if method == Method::GET => {
            lb::list_security_groups(shared, request, rg)
        }
        ArmTarget::Nics { rg, name: Some(name) } => match *method {
            Method::PUT => network::put_nic(shared, request, rg, name),
            Method::PATCH => network::patch_nic_tags(shared, request, rg, name),
            Method::GET => network::get_nic(shared, rg, name),
            Method::DELETE => network::delete_nic(shared, rg, name),
            _ => method_not_allowed(request),
        },
        _ => method_not_allowed(request),
    })
}

/// ARM accepts only tokens issued for it: here, tokens this fake's token endpoint issued.
fn authenticate(shared: &Shared, request: &ArmRequest) -> Result<(), ArmResponse> {
    let header = request.headers.get("authorization").and_then(|v| v.to_str().ok());
    let challenge = format!(
        "Bearer authorization_uri=\"{}/{}\", error=\"invalid_token\"",
        shared.base_url, shared.config.tenant_id
    );
    let Some(header) = header else {
        return Err(ArmResponse::error(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
        )
        .with_header("WWW-Authenticate", challenge));
    };
    let token = header.strip_prefix("Bearer ").unwrap_or_default();
    let expires = shared.lock().tokens.get(token).copied();
    match expires {
        Some(expires) if Instant::now() < expires => Ok(()),
        Some(_) => Err(ArmResponse::error(
            401,
            "ExpiredAuthenticationToken",
            "The access token expiry UTC time is earlier than current UTC time.",
        )
        .with_header("WWW-Authenticate", challenge)),
        None => Err(ArmResponse::error(401, "InvalidAuthenticationToken", "The access token is invalid.")
            .with_header("WWW-Authenticate", challenge)),
    }
}

fn method_not_allowed(request: &ArmRequest) -> ArmResponse {
    ArmResponse::error(
        405,
        "MethodNotAllowed",
        &format!("The requested resource does not support http method '{}'.", request.method),
    )
}
