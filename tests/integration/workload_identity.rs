//! The credentials besides a client secret, against the fake's Entra ID and instance metadata service.
//!
//! Workload identity over a token file the kubelet rotates: the provider's ARM calls keep working
//! after the service-account token it started with has expired, because the credential reads the file
//! again for each token exchange. azure_identity's own credential, which keeps the first token, is the
//! contrast: the fake's token endpoint refuses its expired assertion, as Entra ID does.
//!
//! Managed identity: the VM's system-assigned identity, or a user-assigned one by client ID, from the
//! instance metadata service; an identity the VM does not have is refused with a message naming it.

use std::sync::Arc;
use std::time::Duration;

use azure_core::auth::TokenCredential;
use azure_identity::WorkloadIdentityCredential;
use fake_azure::arm::{service_account_token, FakeArm, FakeArmConfig};
use karpenter_azure::cloud::azure::credential::{imds_endpoint, FederatedTokenFileCredential};
use karpenter_azure::cloud::azure::{ArmClients, CredentialSource, RetrySettings};

const SUBJECT: &str = "system:serviceaccount:karpenter:karpenter";

#[tokio::test]
async fn arm_calls_keep_working_after_the_projected_token_rotates() {
    // Access tokens live a second; the first service-account token two.
    let fake =
        FakeArm::start(FakeArmConfig { token_lifetime: Duration::from_secs(1), ..FakeArmConfig::default() })
            .await
            .expect("fake ARM starts");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("azure-identity-token");
    std::fs::write(&file, service_account_token(SUBJECT, Duration::from_secs(2))).unwrap();
    let settings = karpenter_azure::cloud::azure::ArmSettings {
        credential: CredentialSource::FederatedTokenFile(file.clone()),
        ..fake.arm_settings(RetrySettings { max_retries: 0, ..RetrySettings::default() })
    };
    let clients = ArmClients::new(&settings).expect("clients build");
    let list = || async {
        let nics =
            clients.network.network_interfaces_client().list(fake.resource_group(), &clients.subscription_id);
        futures::StreamExt::next(&mut nics.into_stream()).await.expect("a page").map(|page| page.value.len())
    };
    assert_eq!(list().await.expect("the first token works"), 0);

    // The kubelet writes a new token; the old one and the access token bought with it expire.
    let stale = WorkloadIdentityCredential::new(
        azure_core::new_http_client(),
        fake.authority_host(),
        fake.tenant_id().to_string(),
        settings.client_id.clone(),
        std::fs::read_to_string(&file).unwrap(),
    );
    std::fs::write(&file, service_account_token(SUBJECT, Duration::from_secs(3600))).unwrap();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(list().await.expect("the rotated token is read and exchanged"), 0);

    let scope = format!("{}/.default", fake.base_url());
    let refused = stale.get_token(&[&scope]).await.expect_err("an expired assertion is refused");
    assert_eq!(refused.kind(), &azure_core::error::ErrorKind::Credential, "{refused:?}");
    let last_exchange = fake.requests().into_iter().rfind(|r| r.path.ends_with("/oauth2/v2.0/token"));
    assert_eq!(last_exchange.map(|r| r.status), Some(400), "Entra ID's AADSTS700024: assertion expired");
}

#[tokio::test]
async fn an_unreadable_token_file_is_a_credential_error_naming_the_file() {
    let fake = FakeArm::start(FakeArmConfig::default()).await.expect("fake ARM starts");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("missing");
    let credential = FederatedTokenFileCredential::new(
        azure_core::new_http_client(),
        fake.authority_host(),
        fake.tenant_id().to_string(),
        "karpenter-client".to_string(),
        file.clone(),
    );
    let scope = format!("{}/.default", fake.base_url());
    let error = credential.get_token(&[&scope]).await.expect_err("nothing to exchange");
    assert!(error.to_string().contains(&file.display().to_string()), "{error}");
    std::fs::write(&file, "\n").unwrap();
    let error = Arc::new(credential).get_token(&[&scope]).await.expect_err("an empty file");
    assert!(error.to_string().contains("empty"), "{error}");
}

#[tokio::test]
async fn the_vms_managed_identity_gets_tokens_from_the_instance_metadata_service() {
    let kubelet_identity = "11111111-2222-3333-4444-555555555555";
    let config =
        FakeArmConfig { managed_identities: vec![kubelet_identity.into()], ..FakeArmConfig::default() };
    let fake = FakeArm::start(config).await.expect("fake ARM starts");
    let endpoint = imds_endpoint(Some(&fake.base_url())).unwrap();
    let settings_for = |client_id: Option<&str>| karpenter_azure::cloud::azure::ArmSettings {
        credential: CredentialSource::ManagedIdentity {
            client_id: client_id.map(str::to_string),
            endpoint: endpoint.clone(),
        },
        ..fake.arm_settings(RetrySettings { max_retries: 0, ..RetrySettings::default() })
    };
    for client_id in [None, Some(kubelet_identity)] {
        let clients = ArmClients::new(&settings_for(client_id)).expect("clients build");
        let nics =
            clients.network.network_interfaces_client().list(fake.resource_group(), &clients.subscription_id);
        let page = futures::StreamExt::next(&mut nics.into_stream()).await.expect("a page");
        assert!(page.is_ok(), "{client_id:?}: {page:?}");
    }
    let metadata_calls = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/metadata/identity/oauth2/token" && r.status == 200)
        .count();
    assert_eq!(metadata_calls, 2, "one token per credential");

    let unknown = "99999999-2222-3333-4444-555555555555";
    let scope = format!("{}/.default", fake.base_url());
    let credential = karpenter_azure::cloud::azure::credential::ManagedIdentityCredential::new(
        reqwest::Client::new(),
        endpoint.clone(),
        Some(unknown.to_string()),
    );
    let error = credential.get_token(&[&scope]).await.expect_err("the VM has no such identity");
    assert!(
        error.to_string().contains(unknown) && error.to_string().contains("Identity not found"),
        "{error}"
    );
}
