//! The fake ARM server is real enough for the production Azure clients: azure_identity credentials get
//! tokens from it, and azure_mgmt_compute / azure_mgmt_network 0.21 create, read, list and delete NICs and
//! VMs against it, see long-running operations progress, and receive injected errors with the ARM status and
//! code. Where the SDK exposes no way to observe something (operation-status documents, raw headers), the
//! test uses reqwest with a token from the fake.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use azure_core::auth::TokenCredential;
use azure_core::error::ErrorKind;
use azure_core::RetryOptions;
use azure_identity::{ClientSecretCredential, WorkloadIdentityCredential};
use azure_mgmt_compute::package_2024_07_01 as compute;
use base64::Engine as _;
use fake_azure::arm::{
    service_account_token, BootedVm, CreateError, Delivery, FakeArm, FakeArmConfig, Fault, NodeRegistrar,
    QuotaScope, Target,
};
use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::{json, Value};

/// A fake plus production clients authenticated by a client secret against it.
struct Harness {
    fake: FakeArm,
    compute: compute::Client,
    network: azure_mgmt_network::Client,
}

async fn harness(config: FakeArmConfig, retry: Option<RetryOptions>) -> Harness {
    let fake = FakeArm::start(config).await.expect("fake ARM starts");
    let (client_id, secret) = fake.client_credentials();
    let credential = Arc::new(ClientSecretCredential::new(
        azure_core::new_http_client(),
        fake.authority_host(),
        fake.tenant_id().to_string(),
        client_id.to_string(),
        secret.to_string(),
    ));
    let mut compute_builder = compute::Client::builder(credential.clone()).endpoint(fake.endpoint());
    let mut network_builder = azure_mgmt_network::Client::builder(credential).endpoint(fake.endpoint());
    if let Some(retry) = retry {
        compute_builder = compute_builder.retry(retry.clone());
        network_builder = network_builder.retry(retry);
    }
    Harness { compute: compute_builder.build().unwrap(), network: network_builder.build().unwrap(), fake }
}

impl Harness {
    fn vms(&self) -> compute::virtual_machines::Client {
        self.compute.virtual_machines_client()
    }

    fn nics(&self) -> azure_mgmt_network::network_interfaces::Client {
        self.network.network_interfaces_client()
    }

    fn rg(&self) -> String {
        self.fake.resource_group().to_string()
    }

    fn sub(&self) -> String {
        self.fake.subscription_id().to_string()
    }

    async fn create_nic(&self, name: &str) -> azure_mgmt_network::models::NetworkInterface {
        let body: azure_mgmt_network::models::NetworkInterface =
            serde_json::from_value(nic_body(&self.fake)).unwrap();
        self.nics().create_or_update(self.rg(), name, body, self.sub()).await.expect("NIC created")
    }

    fn vm_body(
        &self,
        name: &str,
        size: &str,
        zone: Option<&str>,
        spot: bool,
    ) -> compute::models::VirtualMachine {
        serde_json::from_value(vm_json(&self.fake, name, size, zone, spot, Some(&custom_data()))).unwrap()
    }

    /// NIC then VM, submitted without waiting (one PUT, as the launcher will do).
    async fn submit_vm(
        &self,
        name: &str,
        size: &str,
        zone: Option<&str>,
        spot: bool,
    ) -> azure_core::Result<azure_core::Response> {
        self.create_nic(name).await;
        let body = self.vm_body(name, size, zone, spot);
        self.vms().create_or_update(self.rg(), name, body, self.sub()).send().await.map(Into::into)
    }

    async fn wait_for_state(&self, name: &str, wanted: &str) -> compute::models::VirtualMachine {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let vm = self.vms().get(self.rg(), name, self.sub()).await.expect("VM readable");
            let state = vm.properties.as_ref().and_then(|p| p.provisioning_state.clone()).unwrap_or_default();
            if state == wanted || Instant::now() > deadline {
                assert_eq!(state, wanted, "VM {name} never reached {wanted}");
                return vm;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn nic_body(fake: &FakeArm) -> Value {
    let subnet = format!(
        "/subscriptions/{}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
        fake.subscription_id()
    );
    json!({
        "location": "eastus",
        "tags": { "karpenter.azure.com_cluster": "test" },
        "properties": {
            "enableAcceleratedNetworking": true,
            "ipConfigurations": [{
                "name": "ipconfig1",
                "properties": { "primary": true, "privateIPAllocationMethod": "Dynamic", "subnet": { "id": subnet } }
            }]
        }
    })
}

fn vm_json(
    fake: &FakeArm,
    name: &str,
    size: &str,
    zone: Option<&str>,
    spot: bool,
    custom_data: Option<&str>,
) -> Value {
    let nic_id = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces/{name}",
        fake.subscription_id(),
        fake.resource_group()
    );
    let mut vm = json!({
        "location": "eastus",
        "zones": zone.map(|z| vec![z]).unwrap_or_default(),
        "tags": { "karpenter.azure.com_cluster": "test", "karpenter.sh_nodepool": "default", "team": "a/b c" },
        "properties": {
            "hardwareProfile": { "vmSize": size },
            "storageProfile": {
                "imageReference": { "communityGalleryImageId": "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/versions/202501.01.0" },
                "osDisk": { "name": name, "createOption": "FromImage", "deleteOption": "Delete", "diskSizeGB": 128 }
            },
            "osProfile": {
                "computerName": name,
                "adminUsername": "azureuser",
                "linuxConfiguration": { "disablePasswordAuthentication": true, "ssh": { "publicKeys": [{ "path": "/home/azureuser/.ssh/authorized_keys", "keyData": "ssh-rsa AAAAB3Nza test" }] } }
            },
            "networkProfile": { "networkInterfaces": [{ "id": nic_id, "properties": { "primary": true, "deleteOption": "Delete" } }] },
            "priority": if spot { "Spot" } else { "Regular" }
        }
    });
    if let Some(data) = custom_data {
        vm["properties"]["osProfile"]["customData"] = json!(data);
    }
    if spot {
        vm["properties"]["evictionPolicy"] = json!("Delete");
        vm["properties"]["billingProfile"] = json!({ "maxPrice": -1 });
    }
    vm
}

fn custom_data() -> String {
    let script = "#!/bin/bash\nKUBELET_FLAGS=\"--max-pods=110 --node-labels=karpenter.sh/nodepool=default,kubernetes.azure.com/mode=user --register-with-taints=karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule\"\n/opt/azure/containers/provision.sh\n";
    base64::engine::general_purpose::STANDARD.encode(script)
}

/// (HTTP status, ARM error code) of an SDK error.
fn status_and_code(err: &azure_core::Error) -> (u16, String) {
    match err.kind() {
        ErrorKind::HttpResponse { status, error_code } => {
            (u16::from(*status), error_code.clone().unwrap_or_default())
        }
        other => panic!("expected an HTTP error, got {other:?}: {err}"),
    }
}

fn no_retry() -> Option<RetryOptions> {
    Some(RetryOptions::none())
}

async fn raw_get(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn client_secret_and_workload_identity_credentials_get_tokens() {
    let projected =
        service_account_token("system:serviceaccount:karpenter:karpenter", Duration::from_secs(600));
    let config = FakeArmConfig { federated_token: Some(projected.clone()), ..FakeArmConfig::default() };
    let h = harness(config, None).await;
    // ClientSecretCredential ran inside harness(); a list proves ARM accepts its token.
    let mut pages = h.nics().list(h.rg(), h.sub()).into_stream();
    assert!(pages.next().await.unwrap().unwrap().value.is_empty());

    let scope = format!("{}/.default", h.fake.base_url());
    let workload = WorkloadIdentityCredential::new(
        azure_core::new_http_client(),
        h.fake.authority_host(),
        h.fake.tenant_id().to_string(),
        "karpenter-client".to_string(),
        projected,
    );
    let token = workload.get_token(&[&scope]).await.expect("federated token exchange");
    let network =
        azure_mgmt_network::Client::builder(Arc::new(workload)).endpoint(h.fake.endpoint()).build().unwrap();
    let mut pages = network.network_interfaces_client().list(h.rg(), h.sub()).into_stream();
    assert!(pages.next().await.unwrap().is_ok());
    assert!(token.token.secret().starts_with("fake-arm."));
    let token_requests = h.fake.requests().iter().filter(|r| r.path.ends_with("/oauth2/v2.0/token")).count();
    assert_eq!(token_requests, 2, "one per credential; the SDK caches tokens");

    let wrong = WorkloadIdentityCredential::new(
        azure_core::new_http_client(),
        h.fake.authority_host(),
        h.fake.tenant_id().to_string(),
        "karpenter-client".to_string(),
        service_account_token("system:serviceaccount:other:other", Duration::from_secs(600)),
    );
    assert!(wrong.get_token(&[&scope]).await.is_err());
}

#[tokio::test]
async fn requests_without_api_version_or_token_are_refused() {
    let h = harness(FakeArmConfig::default(), None).await;
    let url = format!(
        "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachines",
        h.fake.base_url(),
        h.sub(),
        h.rg()
    );
    let token = h.fake.issue_token();

    let cases = [
        (format!("{url}?api-version=2024-07-01"), None, 401, "AuthenticationFailed"),
        (format!("{url}?api-version=2024-07-01"), Some("forged"), 401, "InvalidAuthenticationToken"),
        (url.clone(), Some(token.as_str()), 400, "MissingApiVersionParameter"),
        (format!("{url}?api-version=2099-01-01"), Some(token.as_str()), 400, "InvalidApiVersionParameter"),
        (format!("{url}?api-version=2024-07-01"), Some(token.as_str()), 200, ""),
    ];
    for (url, token, status, code) in cases {
        let response = raw_get(&url, token).await;
        assert_eq!(response.status().as_u16(), status, "{url}");
        let body: Value = response.json().await.unwrap();
        if !code.is_empty() {
            assert_eq!(body["error"]["code"], code, "{body}");
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }
    let other_rg = url.replace(&h.rg(), "nope");
    let response = raw_get(&format!("{other_rg}?api-version=2024-07-01"), Some(&token)).await;
    assert_eq!(response.status().as_u16(), 404);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "ResourceGroupNotFound");
}

#[tokio::test]
async fn nic_create_get_list_delete() {
    let config = FakeArmConfig { list_page_size: Some(2), ..FakeArmConfig::default() };
    let h = harness(config, None).await;
    let nic = h.create_nic("aks-default-abc12").await;
    let props = nic.properties.as_ref().unwrap();
    assert_eq!(nic.resource.name.as_deref(), Some("aks-default-abc12"));
    assert_eq!(props.enable_accelerated_networking, Some(true));
    assert!(props.ip_configurations[0].properties.as_ref().unwrap().private_ip_address.is_some());
    h.create_nic("aks-default-abc13").await;
    h.create_nic("aks-default-abc14").await;

    let got = h.nics().get(h.rg(), "aks-default-abc12", h.sub()).await.unwrap();
    assert_eq!(got.resource.id, nic.resource.id);
    assert_eq!(got.resource.tags, nic.resource.tags);

    // Page size 2: the SDK follows nextLink to collect all three.
    let mut names = Vec::new();
    let mut pages = h.nics().list(h.rg(), h.sub()).into_stream();
    while let Some(page) = pages.next().await {
        names.extend(page.unwrap().value.into_iter().filter_map(|n| n.resource.name));
    }
    assert_eq!(names, ["aks-default-abc12", "aks-default-abc13", "aks-default-abc14"]);

    let deleted = h.nics().delete(h.rg(), "aks-default-abc12", h.sub()).send().await.unwrap();
    assert_eq!(u16::from(deleted.as_raw_response().status()), 202);
    let err = h.nics().get(h.rg(), "aks-default-abc12", h.sub()).await.unwrap_err();
    assert_eq!(status_and_code(&err), (404, "ResourceNotFound".to_string()));
    // Deleting what is gone succeeds (204), so "NotFound is success" needs no special case.
    let again = h.nics().delete(h.rg(), "aks-default-abc12", h.sub()).send().await.unwrap();
    assert_eq!(u16::from(again.as_raw_response().status()), 204);
}

#[tokio::test]
async fn vm_create_is_a_long_running_operation() {
    let config = FakeArmConfig { provisioning_delay: Duration::from_millis(600), ..FakeArmConfig::default() };
    let h = harness(config, None).await;
    let response = h.submit_vm("aks-default-lro01", "Standard_D4s_v5", Some("2"), false).await.unwrap();
    assert_eq!(u16::from(response.status()), 201);
    let async_op =
        response.headers().get_optional_str(&azure_core::headers::AZURE_ASYNCOPERATION).unwrap().to_string();
    let location = response.headers().get_optional_str(&azure_core::headers::LOCATION).unwrap().to_string();
    assert!(response.headers().get_optional_str(&azure_core::headers::RETRY_AFTER).is_some());
    let created: compute::models::VirtualMachine =
        serde_json::from_slice(&response.into_body().collect().await.unwrap()).unwrap();
    assert_eq!(created.properties.as_ref().unwrap().provisioning_state.as_deref(), Some("Creating"));

    let token = h.fake.issue_token();
    let first: Value = raw_get(&async_op, Some(&token)).await.json().await.unwrap();
    assert_eq!(first["status"], "InProgress");
    assert_eq!(raw_get(&location, Some(&token)).await.status().as_u16(), 202);
    let vm = h.wait_for_state("aks-default-lro01", "Succeeded").await;
    let done: Value = raw_get(&async_op, Some(&token)).await.json().await.unwrap();
    assert_eq!(done["status"], "Succeeded");
    let final_vm: Value = raw_get(&location, Some(&token)).await.json().await.unwrap();
    assert_eq!(final_vm["properties"]["provisioningState"], "Succeeded");

    let props = vm.properties.unwrap();
    assert_eq!(vm.resource.type_.as_deref(), Some("Microsoft.Compute/virtualMachines"));
    assert_eq!(vm.zones, ["2"]);
    assert_eq!(vm.resource.tags.unwrap()["team"], "a/b c");
    assert_eq!(serde_json::to_value(props.hardware_profile.unwrap().vm_size).unwrap(), "Standard_D4s_v5");
    assert!(props.vm_id.is_some() && props.time_created.is_some());
    let os = props.os_profile.unwrap();
    assert!(os.custom_data.is_none(), "custom data is never returned");
    assert_eq!(os.computer_name.as_deref(), Some("aks-default-lro01"));
    assert!(props.network_profile.is_some());

    // azure_mgmt_compute 0.21's own LRO (`.await`) does not wait for the VM: it re-sends the PUT after
    // Retry-After and takes any 200 as success, because it looks for `properties.provisioning_state`
    // (snake_case) in the camelCase body and so never finds the state. The launcher must poll itself.
    h.create_nic("aks-default-lro02").await;
    let body = h.vm_body("aks-default-lro02", "Standard_D2s_v5", None, false);
    let vm = h.vms().create_or_update(h.rg(), "aks-default-lro02", body, h.sub()).await.unwrap();
    assert_eq!(vm.properties.unwrap().provisioning_state.as_deref(), Some("Creating"));
    assert_eq!(h.fake.vm_put_count("aks-default-lro02"), 2);
    assert_eq!(h.fake.vm_put_count("aks-default-lro01"), 1);
    h.wait_for_state("aks-default-lro02", "Succeeded").await;

    let mut pages = h.vms().list(h.rg(), h.sub()).into_stream();
    let listed: Vec<String> =
        pages.next().await.unwrap().unwrap().value.into_iter().filter_map(|v| v.resource.name).collect();
    assert_eq!(listed, ["aks-default-lro01", "aks-default-lro02"]);
}

#[tokio::test]
async fn vm_force_delete_takes_its_nic_and_then_is_gone() {
    let h = harness(FakeArmConfig::default(), None).await;
    h.submit_vm("aks-default-del01", "Standard_D2s_v5", Some("1"), false).await.unwrap();
    h.wait_for_state("aks-default-del01", "Succeeded").await;
    let err = h.nics().delete(h.rg(), "aks-default-del01", h.sub()).send().await.unwrap_err();
    assert_eq!(status_and_code(&err), (400, "NicInUse".to_string()));

    let deleted =
        h.vms().delete(h.rg(), "aks-default-del01", h.sub()).force_deletion(true).send().await.unwrap();
    assert_eq!(u16::from(deleted.as_raw_response().status()), 202);
    assert!(h.fake.requests().iter().any(|r| r.method == "DELETE" && r.query.contains("forceDeletion=true")));
    h.wait_for_state("aks-default-del01", "Deleting").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = loop {
        match h.vms().get(h.rg(), "aks-default-del01", h.sub()).await {
            Err(err) => break err,
            Ok(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Ok(_) => panic!("VM never went away"),
        }
    };
    assert_eq!(status_and_code(&err), (404, "ResourceNotFound".to_string()));
    // deleteOption Delete on the NIC reference: the NIC went with the VM.
    assert!(h.fake.nics().is_empty());
    let again = h.vms().delete(h.rg(), "aks-default-del01", h.sub()).send().await.unwrap();
    assert_eq!(u16::from(again.as_raw_response().status()), 204);
}

#[tokio::test]
async fn synchronous_capacity_errors_reach_the_client_with_their_codes() {
    let h = harness(FakeArmConfig::default(), no_retry()).await;
    let cases = [
        (CreateError::ZonalAllocationFailed, "ZonalAllocationFailed"),
        (CreateError::AllocationFailed, "AllocationFailed"),
        (CreateError::SkuNotAvailable, "SkuNotAvailable"),
    ];
    for (index, (error, code)) in cases.into_iter().enumerate() {
        let target =
            Target { sku: Some("Standard_D4s_v5".into()), zone: Some("eastus-1".into()), priority: None };
        h.fake.inject(Fault::Capacity { error, target, delivery: Delivery::Sync, times: Some(1) });
        let name = format!("aks-default-cap0{index}");
        let err = h.submit_vm(&name, "Standard_D4s_v5", Some("1"), false).await.unwrap_err();
        assert_eq!(status_and_code(&err), (409, code.to_string()));
        assert!(h.fake.vm(&name).is_none(), "a refused create leaves no VM");
    }
    // Other zones and sizes were never affected, and `times: 1` faults are used up.
    h.fake.inject(Fault::Capacity {
        error: CreateError::ZonalAllocationFailed,
        target: Target { zone: Some("1".into()), ..Target::default() },
        delivery: Delivery::Sync,
        times: None,
    });
    assert!(h.submit_vm("aks-default-cap10", "Standard_D4s_v5", Some("2"), false).await.is_ok());
    let err = h.submit_vm("aks-default-cap11", "Standard_D2s_v5", Some("1"), false).await.unwrap_err();
    let message = err.as_http_error().and_then(|e| e.error_message()).unwrap_or_default().to_string();
    assert!(message.contains("sufficient capacity for the requested VM size in this zone"), "{message}");
}

#[tokio::test]
async fn asynchronous_capacity_error_fails_the_operation() {
    let h = harness(FakeArmConfig::default(), no_retry()).await;
    h.fake.inject(Fault::Capacity {
        error: CreateError::AllocationFailed,
        target: Target { priority: Some("Spot".into()), ..Target::default() },
        delivery: Delivery::Async,
        times: None,
    });
    let response = h.submit_vm("aks-spot-async1", "Standard_D4s_v5", None, true).await.unwrap();
    assert_eq!(u16::from(response.status()), 201);
    let async_op =
        response.headers().get_optional_str(&azure_core::headers::AZURE_ASYNCOPERATION).unwrap().to_string();
    h.wait_for_state("aks-spot-async1", "Failed").await;
    let status: Value = raw_get(&async_op, Some(&h.fake.issue_token())).await.json().await.unwrap();
    assert_eq!(status["status"], "Failed");
    assert_eq!(status["error"]["code"], "AllocationFailed");

    // The SDK's `.await` does not notice: it returns Ok while the VM is still Creating (see the LRO test).
    h.create_nic("aks-spot-async2").await;
    let body = h.vm_body("aks-spot-async2", "Standard_D4s_v5", None, true);
    let vm = h.vms().create_or_update(h.rg(), "aks-spot-async2", body, h.sub()).await.unwrap();
    assert_eq!(vm.properties.unwrap().provisioning_state.as_deref(), Some("Creating"));
    h.wait_for_state("aks-spot-async2", "Failed").await;
    // A repeated PUT of a failed VM reports the failure; it does not retry the create.
    let body = h.vm_body("aks-spot-async2", "Standard_D4s_v5", None, true);
    let vm = h
        .vms()
        .create_or_update(h.rg(), "aks-spot-async2", body, h.sub())
        .send()
        .await
        .unwrap()
        .into_body()
        .await
        .unwrap();
    assert_eq!(vm.properties.unwrap().provisioning_state.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn quota_error_reports_limit_usage_and_required_cores() {
    let h = harness(FakeArmConfig::default(), no_retry()).await;
    h.fake.inject(Fault::Quota {
        scope: QuotaScope::Family { family: None },
        limit: 10,
        delivery: Delivery::Sync,
    });
    h.submit_vm("aks-default-quota1", "Standard_D8s_v5", Some("1"), false).await.unwrap();
    let err = h.submit_vm("aks-default-quota2", "Standard_D4s_v5", Some("1"), false).await.unwrap_err();
    assert_eq!(status_and_code(&err), (409, "OperationNotAllowed".to_string()));
    let message = err.as_http_error().and_then(|e| e.error_message()).unwrap_or_default().to_string();
    assert!(message.contains("exceeding approved standardDSv5Family Cores quota"), "{message}");
    assert!(message.contains("Current Limit: 10, Current Usage: 8, Additional Required: 4"), "{message}");
    // Spot cores are a different quota.
    assert!(h.submit_vm("aks-spot-quota3", "Standard_D4s_v5", Some("1"), true).await.is_ok());
}

#[tokio::test]
async fn throttling_and_server_errors_carry_status_code_and_retry_after() {
    let h = harness(FakeArmConfig::default(), no_retry()).await;
    h.fake.inject(Fault::Throttle { requests: 1, retry_after_secs: 7, path_prefix: None });
    let err = h.vms().get(h.rg(), "anything", h.sub()).await.unwrap_err();
    assert_eq!(status_and_code(&err), (429, "TooManyRequests".to_string()));
    assert!(err.as_http_error().unwrap().to_string().contains("retry-after:7"), "{err:#}");

    h.fake.inject(Fault::ServerError { requests: 1, path_prefix: None });
    let err = h.vms().get(h.rg(), "anything", h.sub()).await.unwrap_err();
    assert_eq!(status_and_code(&err), (500, "InternalServerError".to_string()));
    // Both were one-shot: the next request reaches the handler.
    let err = h.vms().get(h.rg(), "anything", h.sub()).await.unwrap_err();
    assert_eq!(status_and_code(&err), (404, "ResourceNotFound".to_string()));

    // A path prefix confines throttling to one resource type.
    h.fake.inject(Fault::Throttle {
        requests: 5,
        retry_after_secs: 1,
        path_prefix: Some(format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network",
            h.sub(),
            h.rg()
        )),
    });
    assert_eq!(status_and_code(&h.vms().get(h.rg(), "x", h.sub()).await.unwrap_err()).0, 404);
    assert_eq!(status_and_code(&h.nics().get(h.rg(), "x", h.sub()).await.unwrap_err()).0, 429);
}

#[tokio::test]
async fn default_retry_policy_honours_retry_after_and_retries_500() {
    let h = harness(FakeArmConfig::default(), None).await;
    h.fake.inject(Fault::Throttle { requests: 1, retry_after_secs: 1, path_prefix: None });
    h.fake.inject(Fault::ServerError { requests: 1, path_prefix: None });
    let started = Instant::now();
    let mut pages = h.vms().list(h.rg(), h.sub()).into_stream();
    assert!(pages.next().await.unwrap().is_ok());
    assert!(started.elapsed() >= Duration::from_secs(1), "waited {:?}", started.elapsed());
    let statuses: Vec<u16> =
        h.fake.requests().iter().filter(|r| r.path.ends_with("virtualMachines")).map(|r| r.status).collect();
    assert_eq!(statuses, [429, 500, 200]);
}

#[tokio::test]
async fn resource_skus_parse_with_the_sdk_model() {
    let h = harness(FakeArmConfig::default(), None).await;
    let mut pages =
        h.compute.resource_skus_client().list(h.sub()).filter("location eq 'eastus'").into_stream();
    let skus = pages.next().await.unwrap().unwrap().value;
    assert!(skus.len() > 500, "{}", skus.len());
    let d4 = skus.iter().find(|s| s.name.as_deref() == Some("Standard_D4s_v5")).expect("D4s_v5 listed");
    let capability = |name: &str| {
        d4.capabilities.iter().find(|c| c.name.as_deref() == Some(name)).and_then(|c| c.value.clone())
    };
    assert_eq!(capability("vCPUs").as_deref(), Some("4"));
    assert_eq!(capability("MemoryGB").as_deref(), Some("16"));
    assert_eq!(capability("CpuArchitectureType").as_deref(), Some("x64"));
    assert_eq!(capability("LowPriorityCapable").as_deref(), Some("True"));
    assert_eq!(capability("HyperVGenerations").as_deref(), Some("V1,V2"));
    assert_eq!(d4.locations, ["eastus"]);
    assert_eq!(d4.location_info[0].zones, ["1", "2", "3"]);
    assert_eq!(
        (d4.resource_type.as_deref(), d4.tier.as_deref(), d4.size.as_deref()),
        (Some("virtualMachines"), Some("Standard"), Some("D4s_v5"))
    );
    assert!(skus.iter().all(|s| s.locations == ["eastus"]));
}

/// Records registrations and deregistrations.
#[derive(Default)]
struct Recorder {
    booted: Mutex<Vec<BootedVm>>,
    gone: Mutex<Vec<String>>,
}

impl NodeRegistrar for Recorder {
    fn register(&self, vm: BootedVm) -> BoxFuture<'static, Result<(), String>> {
        self.booted.lock().unwrap().push(vm);
        Box::pin(async { Ok(()) })
    }

    fn deregister(&self, vm_name: String) -> BoxFuture<'static, Result<(), String>> {
        self.gone.lock().unwrap().push(vm_name);
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn succeeded_vms_boot_and_spot_eviction_removes_them() {
    let recorder = Arc::new(Recorder::default());
    let config = FakeArmConfig { registrar: Some(recorder.clone()), ..FakeArmConfig::default() };
    let h = harness(config, None).await;
    h.submit_vm("aks-spot-boot1", "Standard_D4s_v5", Some("3"), true).await.unwrap();
    h.wait_for_state("aks-spot-boot1", "Succeeded").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while recorder.booted.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let booted = recorder.booted.lock().unwrap().first().cloned().expect("the VM booted");
    assert_eq!(
        booted.provider_id,
        format!("azure:///subscriptions/{}/resourceGroups/mc_rg_cluster_eastus/providers/Microsoft.Compute/virtualMachines/aks-spot-boot1", h.sub())
    );
    assert_eq!(booted.zone.as_deref(), Some("eastus-3"));
    assert_eq!(booted.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(booted.labels["topology.kubernetes.io/zone"], "eastus-3");
    assert_eq!(booted.labels["node.kubernetes.io/instance-type"], "Standard_D4s_v5");
    assert_eq!(booted.taints.len(), 2);
    assert_eq!(booted.capacity["cpu"], "4");
    assert_eq!(booted.capacity["pods"], "110");

    assert!(h.fake.evict("aks-spot-boot1"));
    let err = h.vms().get(h.rg(), "aks-spot-boot1", h.sub()).await.unwrap_err();
    assert_eq!(status_and_code(&err), (404, "ResourceNotFound".to_string()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(*recorder.gone.lock().unwrap(), ["aks-spot-boot1"]);
    assert!(!h.fake.evict("aks-spot-boot1"));
}

#[tokio::test]
async fn admin_api_injects_faults_and_dumps_state() {
    let h = harness(FakeArmConfig::default(), no_retry()).await;
    let http = reqwest::Client::new();
    let fault =
        json!({ "kind": "capacity", "error": "SkuNotAvailable", "target": { "sku": "Standard_D2s_v5" } });
    let injected =
        http.post(format!("{}/_admin/faults", h.fake.base_url())).json(&fault).send().await.unwrap();
    assert_eq!(injected.status().as_u16(), 204);
    let err = h.submit_vm("aks-default-adm1", "Standard_D2s_v5", None, false).await.unwrap_err();
    assert_eq!(status_and_code(&err), (409, "SkuNotAvailable".to_string()));
    let slow = json!([{ "kind": "slow_provisioning", "delay_ms": 60000, "target": {} }]);
    http.post(format!("{}/_admin/faults", h.fake.base_url())).json(&slow).send().await.unwrap();
    h.submit_vm("aks-default-adm2", "Standard_D4s_v5", None, false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let state: Value =
        http.get(format!("{}/_admin/state", h.fake.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(state["vms"][0]["name"], "aks-default-adm2");
    assert_eq!(state["vms"][0]["provisioningState"], "Creating");
    assert_eq!(state["vmPuts"]["aks-default-adm1"], 1);
    let cleared = http.delete(format!("{}/_admin/faults", h.fake.base_url())).send().await.unwrap();
    assert_eq!(cleared.status().as_u16(), 204);
    assert!(h.fake.faults().is_empty());
}

#[test]
fn kubelet_flags_parse_from_custom_data() {
    let flags = fake_azure::arm::boot::parse_custom_data(&custom_data()).unwrap();
    assert_eq!(flags.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(flags.labels["kubernetes.azure.com/mode"], "user");
    assert_eq!(flags.max_pods, Some(110));
    let taints: Vec<(String, Option<String>, String)> =
        flags.taints.iter().map(|t| (t.key.clone(), t.value.clone(), t.effect.clone())).collect();
    assert_eq!(
        taints,
        [
            ("karpenter.sh/unregistered".to_string(), None, "NoExecute".to_string()),
            ("dedicated".to_string(), Some("gpu".to_string()), "NoSchedule".to_string()),
        ]
    );
    let parse = fake_azure::arm::boot::parse_kubelet_flags;
    let last_wins = parse("--node-labels=a=1 --node-labels 'b=2,c=' --register-with-taints=").unwrap();
    assert_eq!(
        last_wins.labels.into_iter().collect::<Vec<_>>(),
        [("b".into(), "2".into()), ("c".into(), String::new())]
    );
    assert!(last_wins.taints.is_empty());
    assert!(parse("--register-with-taints=k=v:Sometimes").is_err());
    assert!(parse("--node-labels=novalue").is_err());
    assert!(parse("--node-labels-other=x").unwrap().labels.is_empty());
    assert!(fake_azure::arm::boot::parse_custom_data("not base64!").is_err());
}

#[test]
fn node_object_is_what_a_kubelet_registers_for_kwok() {
    let vm = BootedVm {
        name: "aks-default-n1".into(),
        provider_id: "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-default-n1".into(),
        zone: Some("eastus-1".into()),
        vm_size: "Standard_D4s_v5".into(),
        labels: [("karpenter.sh/nodepool".to_string(), "default".to_string())].into(),
        taints: fake_azure::arm::boot::parse_kubelet_flags("--register-with-taints=karpenter.sh/unregistered:NoExecute").unwrap().taints,
        capacity: [("cpu".to_string(), "4".to_string()), ("pods".to_string(), "250".to_string())].into(),
        allocatable: [("cpu".to_string(), "3860m".to_string())].into(),
        join: None,
    };
    let node = fake_azure::arm::node::node_for(&vm);
    let json = serde_json::to_value(&node).unwrap();
    assert_eq!(json["metadata"]["name"], "aks-default-n1");
    assert_eq!(json["metadata"]["annotations"]["kwok.x-k8s.io/node"], "fake");
    assert_eq!(json["metadata"]["labels"]["karpenter.sh/nodepool"], "default");
    assert_eq!(json["spec"]["providerID"], vm.provider_id);
    assert_eq!(
        json["spec"]["taints"][0],
        json!({ "key": "karpenter.sh/unregistered", "effect": "NoExecute" })
    );
    assert_eq!(json["status"]["capacity"], json!({ "cpu": "4", "pods": "250" }));
    assert_eq!(json["status"]["allocatable"]["cpu"], "3860m");
}

#[test]
fn a_kubelet_without_any_one_bootstrap_variable_cannot_join_and_says_which() {
    use fake_azure::arm::boot::{join_vars, JoinVars};
    use fake_azure::arm::kubelet::bootstrap_inputs;
    let ca = base64::engine::general_purpose::STANDARD
        .encode("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    let script = format!(
        "#!/bin/bash\nAPI_SERVER_NAME=cluster.hcp.eastus.azmk8s.io\nTLS_BOOTSTRAP_TOKEN=\"abcdef.0123456789abcdef\"\nKUBE_CA_CRT=\"{ca}\"\n"
    );
    let complete = join_vars(&script);
    let (certs, name, token) = bootstrap_inputs(&complete).unwrap();
    assert_eq!(
        (certs.len(), name.as_str(), token.as_str()),
        (1, "cluster.hcp.eastus.azmk8s.io", "abcdef.0123456789abcdef")
    );
    let without = |f: fn(&mut JoinVars)| {
        let mut vars = complete.clone();
        f(&mut vars);
        bootstrap_inputs(&vars).unwrap_err()
    };
    assert!(without(|v| v.kube_ca_crt = None).contains("KUBE_CA_CRT is missing"));
    assert!(without(|v| v.api_server_name = None).contains("API_SERVER_NAME is missing"));
    assert!(
        without(|v| v.tls_bootstrap_token = Some(String::new())).contains("TLS_BOOTSTRAP_TOKEN is missing")
    );
    assert!(without(|v| v.kube_ca_crt = Some("bm90IGEgY2VydA==".into())).contains("holds no PEM certificate"));
}

#[test]
fn gpus_show_only_on_nodes_whose_custom_data_installs_the_driver() {
    let gpus = || {
        std::collections::BTreeMap::from([
            ("cpu".to_string(), "6".to_string()),
            ("nvidia.com/gpu".to_string(), "1".to_string()),
        ])
    };
    let mut with_driver = gpus();
    fake_azure::arm::boot::drop_undriven_gpus(
        "GPU_NODE=true\nCONFIG_GPU_DRIVER_IF_NEEDED=true\n",
        &mut with_driver,
    );
    assert_eq!(with_driver.get("nvidia.com/gpu").map(String::as_str), Some("1"));
    let mut without = gpus();
    fake_azure::arm::boot::drop_undriven_gpus("GPU_NODE=false\n", &mut without);
    assert!(!without.contains_key("nvidia.com/gpu"));
}
