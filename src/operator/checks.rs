//! The checks behind [`Options::validate`](super::Options::validate): one function per kind of value,
//! each returning the typed value or an error that names the setting and says what is allowed.

use std::collections::BTreeMap;
use std::time::Duration;

use url::Url;

use super::options::{OptionsError, Setting};
use crate::apis::duration;

/// Every setting with its flag and environment variable, for messages.
pub mod setting {
    use super::Setting;

    const fn s(flag: &'static str, env: &'static str) -> Setting {
        Setting { flag, env, fallback_env: None }
    }

    pub const CLUSTER_NAME: Setting = s("cluster-name", "CLUSTER_NAME");
    pub const CLUSTER_ENDPOINT: Setting = s("cluster-endpoint", "CLUSTER_ENDPOINT");
    pub const SUBSCRIPTION_ID: Setting = Setting {
        flag: "subscription-id",
        env: "AZURE_SUBSCRIPTION_ID",
        fallback_env: Some("ARM_SUBSCRIPTION_ID"),
    };
    pub const TENANT_ID: Setting =
        Setting { flag: "tenant-id", env: "AZURE_TENANT_ID", fallback_env: Some("ARM_TENANT_ID") };
    pub const CLIENT_ID: Setting = s("client-id", "AZURE_CLIENT_ID");
    pub const LOCATION: Setting = s("location", "LOCATION");
    pub const RESOURCE_GROUP: Setting = s("resource-group", "ARM_RESOURCE_GROUP");
    pub const NODE_RESOURCE_GROUP: Setting = s("node-resource-group", "AZURE_NODE_RESOURCE_GROUP");
    pub const ARM_ENDPOINT: Setting = s("arm-endpoint", "ARM_ENDPOINT");
    pub const AUTHORITY_HOST: Setting = s("authority-host", "AZURE_AUTHORITY_HOST");
    pub const RETAIL_PRICES_URL: Setting = s("retail-prices-url", "RETAIL_PRICES_URL");
    pub const VNET_SUBNET_ID: Setting = s("vnet-subnet-id", "VNET_SUBNET_ID");
    pub const KUBELET_BOOTSTRAP_TOKEN: Setting = s("kubelet-bootstrap-token", "KUBELET_BOOTSTRAP_TOKEN");
    pub const SSH_PUBLIC_KEY: Setting = s("ssh-public-key", "SSH_PUBLIC_KEY");
    pub const NETWORK_PLUGIN: Setting = s("network-plugin", "NETWORK_PLUGIN");
    pub const NETWORK_PLUGIN_MODE: Setting = s("network-plugin-mode", "NETWORK_PLUGIN_MODE");
    pub const NETWORK_POLICY: Setting = s("network-policy", "NETWORK_POLICY");
    pub const NETWORK_DATAPLANE: Setting = s("network-dataplane", "NETWORK_DATAPLANE");
    pub const NODE_IDENTITIES: Setting = s("node-identities", "NODE_IDENTITIES");
    pub const CLUSTER_CA_BUNDLE: Setting = s("cluster-ca-bundle", "CLUSTER_CA_BUNDLE");
    pub const DNS_SERVICE_IP: Setting = s("dns-service-ip", "DNS_SERVICE_IP");
    pub const VNET_GUID: Setting = s("vnet-guid", "VNET_GUID");
    pub const KUBELET_IDENTITY_CLIENT_ID: Setting =
        s("kubelet-identity-client-id", "KUBELET_IDENTITY_CLIENT_ID");
    pub const VM_MEMORY_OVERHEAD_PERCENT: Setting =
        s("vm-memory-overhead-percent", "VM_MEMORY_OVERHEAD_PERCENT");
    pub const LINUX_ADMIN_USERNAME: Setting = s("linux-admin-username", "LINUX_ADMIN_USERNAME");
    pub const ADDITIONAL_TAGS: Setting = s("additional-tags", "ADDITIONAL_TAGS");
    pub const BATCH_IDLE_DURATION: Setting = s("batch-idle-duration", "BATCH_IDLE_DURATION");
    pub const BATCH_MAX_DURATION: Setting = s("batch-max-duration", "BATCH_MAX_DURATION");
    pub const LOG_LEVEL: Setting = s("log-level", "LOG_LEVEL");
    pub const LOG_FORMAT: Setting = s("log-format", "LOG_FORMAT");
    pub const METRICS_PORT: Setting = s("metrics-port", "METRICS_PORT");
    pub const HEALTH_PROBE_PORT: Setting = s("health-probe-port", "HEALTH_PROBE_PORT");
    pub const DISABLE_LEADER_ELECTION: Setting = s("disable-leader-election", "DISABLE_LEADER_ELECTION");
    pub const LEADER_ELECTION_NAME: Setting = s("leader-election-name", "LEADER_ELECTION_NAME");
    pub const LEADER_ELECTION_NAMESPACE: Setting =
        s("leader-election-namespace", "LEADER_ELECTION_NAMESPACE");
    pub const SYSTEM_NAMESPACE: Setting = s("system-namespace", "SYSTEM_NAMESPACE");
    pub const FEATURE_GATES: Setting = s("feature-gates", "FEATURE_GATES");
    pub const MIN_VALUES_POLICY: Setting = s("min-values-policy", "MIN_VALUES_POLICY");
    pub const PREFERENCE_POLICY: Setting = s("preference-policy", "PREFERENCE_POLICY");
    pub const NODE_IMAGE_REFRESH_INTERVAL: Setting =
        s("node-image-refresh-interval", "NODE_IMAGE_REFRESH_INTERVAL");
    pub const OS_DISK_ENCRYPTION_SET_ID: Setting =
        s("node-osdisk-diskencryptionset-id", "NODE_OSDISK_DISKENCRYPTIONSET_ID");
}

fn invalid(setting: Setting, reason: impl Into<String>) -> OptionsError {
    OptionsError::Invalid { setting, reason: reason.into() }
}

/// The value itself when it is one of `allowed`.
pub fn one_of(setting: Setting, value: &str, allowed: &[&'static str]) -> Result<&'static str, OptionsError> {
    allowed.iter().copied().find(|a| *a == value).ok_or_else(|| {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        invalid(setting, format!("must be one of {}, got {value:?}", list.join(", ")))
    })
}

/// The API server URL: nodes verify it, so only https with a host will do.
pub fn https_url(setting: Setting, value: &str) -> Result<Url, OptionsError> {
    let url = Url::parse(value)
        .map_err(|e| invalid(setting, format!("must be an https URL, got {value:?}: {e}")))?;
    if url.scheme() != "https" || url.host_str().is_none_or(str::is_empty) {
        return Err(invalid(setting, format!("must be an https URL with a host, got {value:?}")));
    }
    Ok(url)
}

/// An Azure endpoint: https, or plain http to this machine only (a local fake in tests), since tokens
/// travel on it.
pub fn endpoint_url(setting: Setting, value: &str) -> Result<Url, OptionsError> {
    let reason = || format!("must be an https URL (http only to localhost), got {value:?}");
    let url = Url::parse(value).map_err(|_| invalid(setting, reason()))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(invalid(setting, reason())),
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err(invalid(setting, reason())),
    }
}

/// A positive duration: Go's `500ms` as well as the `1h30m` forms of [`duration::parse`].
pub fn duration(setting: Setting, value: &str) -> Result<Duration, OptionsError> {
    let reason = || format!("must be a positive duration such as 500ms, 1s or 1m30s, got {value:?}");
    let parsed = match value.strip_suffix("ms") {
        Some(ms) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => {
            ms.parse().map(Duration::from_millis).map_err(|_| invalid(setting, reason()))?
        }
        _ => duration::parse(value).map_err(|_| invalid(setting, reason()))?,
    };
    if parsed.is_zero() {
        return Err(invalid(setting, reason()));
    }
    Ok(parsed)
}

pub fn port(setting: Setting, value: &str) -> Result<u16, OptionsError> {
    match value.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(invalid(setting, format!("must be a port number from 1 to 65535, got {value:?}"))),
    }
}

/// A boolean as Go's strconv.ParseBool reads it, since upstream's env values were written for it.
pub fn go_bool(setting: Setting, value: &str) -> Result<bool, OptionsError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(setting, format!("must be true or false, got {value:?}"))),
    }
}

fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

pub fn dns_label(setting: Setting, value: &str) -> Result<String, OptionsError> {
    if !is_dns_label(value) {
        return Err(invalid(
            setting,
            format!("must be a DNS label (lowercase letters, digits, '-'), got {value:?}"),
        ));
    }
    Ok(value.to_string())
}

pub fn dns_subdomain(setting: Setting, value: &str) -> Result<String, OptionsError> {
    if value.len() > 253 || !value.split('.').all(is_dns_label) {
        return Err(invalid(setting, format!("must be a DNS subdomain name, got {value:?}")));
    }
    Ok(value.to_string())
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, the Kubernetes bootstrap token format.
pub fn is_bootstrap_token(value: &str) -> bool {
    let part =
        |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    matches!(value.split_once('.'), Some((id, secret)) if part(id, 6) && part(secret, 16))
}

/// An OpenSSH public key line: `<type> <base64> [comment]`.
pub fn ssh_public_key(setting: Setting, value: &str) -> Result<String, OptionsError> {
    let mut fields = value.split_whitespace();
    let key_type = fields.next().unwrap_or_default();
    let body = fields.next().unwrap_or_default();
    let known_type = ["ssh-", "ecdsa-", "sk-"].iter().any(|p| key_type.starts_with(p));
    let base64 = !body.is_empty() && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
    if !known_type || !base64 {
        return Err(invalid(setting, "must be an OpenSSH public key such as \"ssh-rsa AAAA... comment\""));
    }
    Ok(value.trim().to_string())
}

/// Azure's rule for Linux admin names, as upstream validates it: at most 32 characters, starting with
/// a letter, then letters, digits, '-' or '_'.
pub fn admin_username(setting: Setting, value: &str) -> Result<String, OptionsError> {
    let mut chars = value.chars();
    let ok = value.len() <= 32
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(invalid(
            setting,
            format!("must be at most 32 letters, digits, '-' or '_', starting with a letter, got {value:?}"),
        ));
    }
    Ok(value.to_string())
}

fn is_guid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub fn guid(setting: Setting, value: &str) -> Result<String, OptionsError> {
    if !is_guid(value) {
        return Err(invalid(
            setting,
            format!("must be a GUID like 00000000-0000-0000-0000-000000000000, got {value:?}"),
        ));
    }
    Ok(value.to_string())
}

/// A tenant is a GUID or a verified domain such as contoso.onmicrosoft.com.
pub fn tenant(setting: Setting, value: &str) -> Result<String, OptionsError> {
    let domain = value.contains('.') && value.split('.').all(|l| is_dns_label(&l.to_ascii_lowercase()));
    if !is_guid(value) && !domain {
        return Err(invalid(setting, format!("must be a tenant GUID or domain name, got {value:?}")));
    }
    Ok(value.to_string())
}

/// Region names are lowercase letters and digits (eastus, westus2); zone labels are built from them.
pub fn location(setting: Setting, value: &str) -> Result<String, OptionsError> {
    if !value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(invalid(setting, format!("must be a region name such as eastus, got {value:?}")));
    }
    Ok(value.to_string())
}

/// Resource group names as the subnet ID pattern admits them: 1–90 of letters, digits, `_-().`, not
/// ending in a period.
fn is_resource_group(value: &str) -> bool {
    (1..=90).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-().".contains(&b))
        && !value.ends_with('.')
}

pub fn resource_group(setting: Setting, value: &str) -> Result<String, OptionsError> {
    if !is_resource_group(value) {
        return Err(invalid(
            setting,
            format!("must be a resource group name (1-90 letters, digits, _-(). not ending in '.'), got {value:?}"),
        ));
    }
    Ok(value.to_string())
}

/// Whether `id` is `/subscriptions/<s>/resourceGroups/<rg>/providers/<provider>/<type>/<name>[/<type>/<name>]`
/// with the literal parts compared case-insensitively, as ARM does.
fn is_arm_id(id: &str, provider: &str, types: &[&str]) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() != 7 + 2 * types.len() || !parts[0].is_empty() {
        return false;
    }
    let literal = |i: usize, want: &str| parts[i].eq_ignore_ascii_case(want);
    let named = |i: usize| !parts[i].is_empty();
    literal(1, "subscriptions")
        && named(2)
        && literal(3, "resourceGroups")
        && is_resource_group(parts[4])
        && literal(5, "providers")
        && literal(6, provider)
        && types.iter().enumerate().all(|(k, t)| literal(7 + 2 * k, t) && named(8 + 2 * k))
}

/// The same IDs as [`crate::apis::aksnodeclass::SUBNET_ID_PATTERN`] admits (the crate has no regex
/// engine; a test pins the pattern so the two cannot drift apart unnoticed).
pub fn is_subnet_id(id: &str) -> bool {
    is_arm_id(id, "Microsoft.Network", &["virtualNetworks", "subnets"])
}

/// A disk encryption set's ARM ID, as upstream's `validateDiskEncryptionSetID` (options_validation.go)
/// requires: a resource ID of type Microsoft.Compute/diskEncryptionSets with a subscription, a resource
/// group and a name.
pub fn disk_encryption_set_id(setting: Setting, id: &str) -> Result<String, OptionsError> {
    if is_arm_id(id, "Microsoft.Compute", &["diskEncryptionSets"]) {
        return Ok(id.to_string());
    }
    Err(invalid(
        setting,
        format!(
            "must be a disk encryption set ID like /subscriptions/<id>/resourceGroups/<group>/providers/\
             Microsoft.Compute/diskEncryptionSets/<name>, got {id:?}"
        ),
    ))
}

/// Comma-separated user-assigned identity IDs; blanks between commas are ignored.
pub fn identity_ids(setting: Setting, list: &str) -> Result<Vec<String>, OptionsError> {
    let mut ids = Vec::new();
    for id in list.split(',').map(str::trim).filter(|id| !id.is_empty()) {
        if !is_arm_id(id, "Microsoft.ManagedIdentity", &["userAssignedIdentities"]) {
            return Err(invalid(
                setting,
                format!(
                    "must be user-assigned identity IDs like /subscriptions/<id>/resourceGroups/<group>/providers/\
                     Microsoft.ManagedIdentity/userAssignedIdentities/<name>, got {id:?}"
                ),
            ));
        }
        ids.push(id.to_string());
    }
    Ok(ids)
}

/// A share in [0, 1): upstream's VM memory overhead.
pub fn fraction(setting: Setting, value: &str) -> Result<f64, OptionsError> {
    match value.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(f),
        _ => Err(invalid(setting, format!("must be a number at least 0 and below 1, got {value:?}"))),
    }
}

/// `k=v,k=v` under Azure's tag rules: keys up to 512 characters without `<>%&\?/`, values up to 256.
pub fn tags(setting: Setting, list: &str) -> Result<BTreeMap<String, String>, OptionsError> {
    let mut tags = BTreeMap::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').map(|(k, v)| (k.trim(), v.trim())).unwrap_or((pair, ""));
        if !pair.contains('=') || key.is_empty() {
            return Err(invalid(
                setting,
                format!("must be key=value pairs separated by commas, got {pair:?}"),
            ));
        }
        if key.len() > 512 || key.contains(['<', '>', '%', '&', '\\', '?', '/']) || value.len() > 256 {
            return Err(invalid(
                setting,
                format!("tag {key:?}: keys are at most 512 characters without <>%&\\?/, values at most 256"),
            ));
        }
        if tags.insert(key.to_string(), value.to_string()).is_some() {
            return Err(invalid(setting, format!("tag {key:?} is given twice")));
        }
    }
    Ok(tags)
}

/// An IP address (upstream options_validation.go parses DNS_SERVICE_IP with netip.ParseAddr).
pub fn ip_address(setting: Setting, value: &str) -> Result<String, OptionsError> {
    value.parse::<std::net::IpAddr>().map(|ip| ip.to_string()).map_err(|_| OptionsError::Invalid {
        setting,
        reason: format!(
            "{value:?} is not an IP address such as 10.0.0.10 (the cluster DNS service's ClusterIP)"
        ),
    })
}

/// A CA bundle in PEM, given as PEM text or base64 of it (as in a kubeconfig's
/// certificate-authority-data); returned as base64 of the PEM, the form the node image reads.
pub fn ca_bundle(setting: Setting, value: &str) -> Result<String, OptionsError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let pem = if value.contains(BEGIN) {
        value.to_string()
    } else {
        let decoded = azure_core::base64::decode(value.trim()).ok().and_then(|b| String::from_utf8(b).ok());
        decoded.ok_or_else(|| OptionsError::Invalid {
            setting,
            reason: "must be PEM certificates or base64 of them (kubectl config view --raw -o \
                     jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
                .to_string(),
        })?
    };
    if !pem.contains(BEGIN) || !pem.contains("-----END CERTIFICATE-----") {
        return Err(OptionsError::Invalid {
            setting,
            reason: "holds no PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)"
                .to_string(),
        });
    }
    // One form whichever way it was given (the setting's surrounding whitespace is trimmed).
    Ok(azure_core::base64::encode(format!("{}\n", pem.trim())))
}
