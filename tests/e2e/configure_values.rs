//! `hack/configure-values.sh` against recorded `az` output (tests/fixtures/aks/, printed by a stub `az`),
//! then the chart rendered with the file it wrote (`helm template`, no cluster): the controller's
//! environment carries the cluster's values and the controller accepts them; a cluster with Node Auto
//! Provisioning on gets the warning with the command that turns it off; a cluster the controller cannot
//! serve, a field `az` did not print, a failing `az` or missing arguments stop the script with one line
//! naming what is wrong and the fix, and no values file.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

use super::chart_settings::env;
use super::chart_upstream_values::{assert_all_read, controller_validates, running_env};
use super::helm::{find, Helm};

const SCRIPT: &str = "hack/configure-values.sh";
/// Azure CNI overlay with Cilium, workload identity, NAP on, a VNet of its own.
const OVERLAY_NAP: &str = "aks-overlay-cilium-nap.json";
/// kubenet, NAP off, private, AKS's own VNet, no workload identity.
const KUBENET_PRIVATE: &str = "aks-kubenet-private.json";
const IDENTITY: &str = "identity-karpentermsi.json";

const SUBSCRIPTION: &str = "00000000-1111-2222-3333-444444444444";
const KUBELET_CLIENT_ID: &str = "00000000-0000-0000-0000-00000000c1d1";
const CONTROLLER_CLIENT_ID: &str = "00000000-0000-0000-0000-00000000c11e";
const NAP_OFF_COMMAND: &str =
    "az aks update --name shop-prod --resource-group rg-shop --node-provisioning-mode Manual";

/// An `az` that prints the recorded JSON of the command it is given and logs its arguments; a command
/// whose file is missing fails as az does for a resource that does not exist.
const STUB_AZ: &str = r#"#!/bin/sh
echo "$*" >> "$STUB_DIR/calls"
case "$*" in
  "aks show "*) file=$AKS_SHOW ;;
  "identity show "*) file=$IDENTITY_SHOW ;;
  "network vnet show "*) file=$FIXTURES/vnet-shop.json ;;
  "network vnet list "*) file=$FIXTURES/vnet-list-managed.json ;;
  *) echo "ERROR: the az stub has no answer for: $*" >&2; exit 2 ;;
esac
if [ ! -f "$file" ]; then
  echo "ERROR: (ResourceNotFound) The Resource was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix" >&2
  exit 3
fi
cat "$file"
"#;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aks").join(name)
}

/// A recorded `az aks show` with `edit` applied, written into `dir`.
fn edited(dir: &Path, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(fixture(name)).expect("fixture"))
        .expect("fixture JSON");
    edit(&mut json);
    let path = dir.join(format!("edited-{name}"));
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).expect("writing the edited fixture");
    path
}

/// A directory of its own for one run, with the stub as `az`.
fn stub_dir() -> TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let az = dir.path().join("az");
    std::fs::write(&az, STUB_AZ).expect("writing the az stub");
    std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).expect("chmod the az stub");
    dir
}

/// One run of the script in a directory of its own, with the stub as `az` and nothing of the user's
/// environment (no `~/.ssh`, no KARPENTER_* variables).
struct Run {
    dir: TempDir,
    status: Option<i32>,
    stderr: String,
}

impl Run {
    /// Runs `hack/configure-values.sh args...` with `az aks show` answered by `aks` and `az identity
    /// show` by `identity` (a missing file: az fails), plus `vars`.
    fn script(dir: TempDir, aks: &Path, identity: &Path, args: &[&str], vars: &[(&str, &str)]) -> Run {
        let output = Command::new("bash")
            .arg(SCRIPT)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("AZ", dir.path().join("az"))
            .env("STUB_DIR", dir.path())
            .env("FIXTURES", fixture(""))
            .env("AKS_SHOW", aks)
            .env("IDENTITY_SHOW", identity)
            .envs(vars.iter().copied())
            .output()
            .unwrap_or_else(|err| panic!("running {SCRIPT}: {err}"));
        Run {
            dir,
            status: output.status.code(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The script for cluster `name` in `rg`, writing `values.yaml` in its directory.
    fn cluster(aks: &Path, name: &str, rg: &str, vars: &[(&str, &str)]) -> Run {
        let dir = stub_dir();
        let out = dir.path().join("values.yaml");
        Run::script(dir, aks, &fixture(IDENTITY), &[name, rg, out.to_str().unwrap()], vars)
    }

    fn values(&self) -> PathBuf {
        self.dir.path().join("values.yaml")
    }

    /// The az commands the stub was given, one a line.
    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
    }

    /// Succeeded and wrote the values file.
    fn assert_written(&self) {
        assert_eq!(self.status, Some(0), "{}", self.stderr);
        assert!(self.values().is_file(), "no values file:\n{}", self.stderr);
    }

    /// Failed with exit status `code`, one `error:` line (the last) holding every one of `parts`, and
    /// left no file behind.
    fn assert_failed(&self, code: i32, parts: &[&str]) {
        assert_eq!(self.status, Some(code), "{}", self.stderr);
        let errors: Vec<&str> = self.stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "one error line:\n{}", self.stderr);
        assert_eq!(
            self.stderr.lines().last(),
            Some(errors[0]),
            "the error line comes last:\n{}",
            self.stderr
        );
        for part in parts {
            assert!(errors[0].contains(part), "the error line names {part:?}: {}", errors[0]);
        }
        let left: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !matches!(name.as_str(), "az" | "calls") && !name.starts_with("edited-"))
            .collect();
        assert!(left.is_empty(), "files left behind: {left:?}");
    }

    /// The chart rendered with the written values (and the image, which the cluster cannot tell).
    fn render(&self) -> Vec<Value> {
        let values = self.values();
        let args = ["--values", values.to_str().unwrap(), "--set", "image.repository=karpenter-azure"];
        Helm::offline().template(&args).unwrap_or_else(|err| panic!("{err}"))
    }
}

fn assert_env(env: &BTreeMap<String, String>, expected: &[(&str, &str)]) {
    for (name, value) in expected {
        assert_eq!(env.get(*name).map(String::as_str), Some(*value), "{name} in {env:#?}");
    }
}

#[test]
fn configure_values_fills_the_chart_from_an_overlay_cilium_cluster_and_warns_that_nap_is_on() {
    let run = Run::cluster(&fixture(OVERLAY_NAP), "shop-prod", "rg-shop", &[]);
    run.assert_written();
    assert!(
        run.calls().starts_with("aks show --name shop-prod --resource-group rg-shop -o json\n"),
        "{}",
        run.calls()
    );

    let docs = run.render();
    let env = env(&docs);
    let subnet = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-shop-network/providers/Microsoft.Network/virtualNetworks/vnet-shop/subnets/snet-aks-nodes"
    );
    let kubelet_identity = format!(
        "/subscriptions/{SUBSCRIPTION}/resourcegroups/MC_rg-shop_shop-prod_westeurope/providers/Microsoft.ManagedIdentity/userAssignedIdentities/shop-prod-agentpool"
    );
    assert_env(
        &env,
        &[
            ("CLUSTER_NAME", "shop-prod"),
            ("CLUSTER_ENDPOINT", "https://shop-prod-dns-5f2c9a1e.hcp.westeurope.azmk8s.io:443"),
            ("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION),
            ("LOCATION", "westeurope"),
            ("ARM_RESOURCE_GROUP", "rg-shop"),
            ("AZURE_NODE_RESOURCE_GROUP", "MC_rg-shop_shop-prod_westeurope"),
            ("VNET_SUBNET_ID", &subnet),
            ("VNET_GUID", "00000000-0000-0000-0000-00000000e7a1"),
            ("NETWORK_PLUGIN", "azure"),
            ("NETWORK_PLUGIN_MODE", "overlay"),
            ("NETWORK_POLICY", "cilium"),
            ("NETWORK_DATAPLANE", "cilium"),
            ("DNS_SERVICE_IP", "10.0.0.10"),
            ("KUBELET_IDENTITY_CLIENT_ID", KUBELET_CLIENT_ID),
            ("NODE_IDENTITIES", &kubelet_identity),
            (
                "SSH_PUBLIC_KEY",
                "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCfakeShopProdKeyForTestsOnly0000000000 shop-ops@example.com",
            ),
            ("KUBELET_BOOTSTRAP_TOKEN", "secret:karpenter-bootstrap-token/token"),
        ],
    );
    assert!(!env.contains_key("AZURE_CLIENT_ID"), "workload identity injects the client ID");
    let account = find(&docs, "ServiceAccount", Some("karpenter-azure"));
    assert_eq!(account["metadata"]["annotations"]["azure.workload.identity/client-id"], CONTROLLER_CLIENT_ID);
    assert_eq!(
        find(&docs, "Deployment", None)["spec"]["template"]["spec"]["serviceAccountName"],
        "karpenter-azure"
    );
    assert_all_read(&env);
    let validated = controller_validates(&running_env(&env)).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(validated.network.vnet_subnet_id, subnet);

    // NAP on: the warning with the exact command, before anything else is set up.
    assert!(run.stderr.contains("warning: Node Auto Provisioning is on for shop-prod"), "{}", run.stderr);
    assert!(run.stderr.contains(NAP_OFF_COMMAND), "{}", run.stderr);
    // The identity: federated with the chart's ServiceAccount under the cluster's issuer, and its roles
    // on the node resource group, the VNet (in a group of its own) and the kubelet identity.
    for line in [
        "--issuer \"https://westeurope.oic.prod-aks.azure.com/00000000-aaaa-bbbb-cccc-dddddddddddd/00000000-0000-0000-0000-0000000001ce/\"",
        "--subject system:serviceaccount:karpenter:karpenter-azure --audience api://AzureADTokenExchange",
        &format!("--role \"Virtual Machine Contributor\" --scope /subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg-shop_shop-prod_westeurope\n"),
        &format!("--role \"Network Contributor\" --scope /subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg-shop_shop-prod_westeurope\n"),
        &format!("--role \"Network Contributor\" --scope {}\n", subnet.split("/subnets/").next().unwrap()),
        &format!("--role \"Managed Identity Operator\" --scope {kubelet_identity}\n"),
        "USE_MANAGED_IDENTITY=true",
        "kubectl -n karpenter create secret generic karpenter-bootstrap-token",
    ] {
        assert!(run.stderr.contains(line), "stderr has {line:?}:\n{}", run.stderr);
    }
    assert!(!run.stderr.contains("--enable-workload-identity"), "workload identity is on already");
}

#[test]
fn configure_values_refuses_kubenet_with_the_migration_command_and_writes_nothing() {
    let run = Run::cluster(&fixture(KUBENET_PRIVATE), "legacy-batch", "rg-batch", &[]);
    run.assert_failed(
        1,
        &[
            "kubenet",
            "az aks update --name legacy-batch --resource-group rg-batch --network-plugin azure --network-plugin-mode overlay",
        ],
    );
    assert!(!run.stderr.contains("Node Auto Provisioning"), "NAP is off: {}", run.stderr);
}

#[test]
fn configure_values_fills_a_private_azure_cni_cluster_without_nap_or_workload_identity() {
    let dir = stub_dir();
    // The kubenet cluster once moved to Azure CNI (node subnet, no overlay), policy none.
    let aks = edited(dir.path(), KUBENET_PRIVATE, |json| {
        json["networkProfile"]["networkPlugin"] = "azure".into();
    });
    let out = dir.path().join("values.yaml");
    let run =
        Run::script(dir, &aks, &fixture(IDENTITY), &["legacy-batch", "rg-batch", out.to_str().unwrap()], &[]);
    run.assert_written();
    let env = env(&run.render());
    let subnet = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg-batch_legacy-batch_eastus2/providers/Microsoft.Network/virtualNetworks/aks-vnet-31415926/subnets/aks-subnet"
    );
    assert_env(
        &env,
        &[
            (
                "CLUSTER_ENDPOINT",
                "https://legacy-batch-dns-7d3e1b2a.4f6c1d2e-0000-4000-8000-00000000abcd.privatelink.eastus2.azmk8s.io:443",
            ),
            ("LOCATION", "eastus2"),
            ("AZURE_NODE_RESOURCE_GROUP", "MC_rg-batch_legacy-batch_eastus2"),
            ("VNET_SUBNET_ID", &subnet),
            ("VNET_GUID", "00000000-0000-0000-0000-00000000e7a2"),
            ("NETWORK_PLUGIN", "azure"),
            ("NETWORK_PLUGIN_MODE", ""),
            ("NETWORK_POLICY", ""),
            ("NETWORK_DATAPLANE", "azure"),
            ("DNS_SERVICE_IP", "10.2.0.10"),
            ("KUBELET_IDENTITY_CLIENT_ID", "00000000-0000-0000-0000-0000000bc1d1"),
        ],
    );
    assert!(run
        .calls()
        .contains("network vnet list --resource-group MC_rg-batch_legacy-batch_eastus2 -o json"));
    assert!(!run.stderr.contains("Node Auto Provisioning"), "NAP is off: {}", run.stderr);
    // No OIDC issuer yet: the command that turns it on, and the issuer read once it is.
    assert!(
        run.stderr.contains("az aks update --name legacy-batch --resource-group rg-batch --enable-oidc-issuer --enable-workload-identity"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--query oidcIssuerProfile.issuerUrl"), "{}", run.stderr);
    // The VNet is in the node resource group, whose role assignment covers it.
    assert!(!run.stderr.contains("--scope /subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/MC_rg-batch_legacy-batch_eastus2/providers/Microsoft.Network"), "{}", run.stderr);
    controller_validates(&running_env(&env)).unwrap_or_else(|err| panic!("{err}"));
}

#[test]
fn configure_values_with_managed_identity_uses_the_kubelet_identity() {
    let run =
        Run::cluster(&fixture(OVERLAY_NAP), "shop-prod", "rg-shop", &[("USE_MANAGED_IDENTITY", "true")]);
    run.assert_written();
    assert!(!run.calls().contains("identity show"), "no controller identity is looked up: {}", run.calls());
    let docs = run.render();
    let env = env(&docs);
    assert_env(&env, &[("AZURE_CLIENT_ID", KUBELET_CLIENT_ID)]);
    let pod = &find(&docs, "Deployment", None)["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["azure.workload.identity/use"], "false", "no token is injected");
    let account = find(&docs, "ServiceAccount", Some("karpenter-azure"));
    assert!(
        account["metadata"]["annotations"].get("azure.workload.identity/client-id").is_none(),
        "{account}"
    );
    assert!(
        run.stderr.contains("--assignee-object-id 00000000-0000-0000-0000-00000000d1d1"),
        "{}",
        run.stderr
    );

    // What the running pod sees: the chart's values, and no workload identity variables.
    let mut running = running_env(&env);
    running.remove("AZURE_FEDERATED_TOKEN_FILE");
    running.remove("AZURE_TENANT_ID");
    let validated = controller_validates(&running).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        validated.azure.credential,
        karpenter_azure::operator::Credential::ManagedIdentity {
            client_id: Some(KUBELET_CLIENT_ID.to_string())
        }
    );
}

#[test]
fn configure_values_names_a_field_az_did_not_print_and_writes_nothing() {
    for (field, remove, parts) in [
        (".location", &["location"][..], &["location (.location)", "az aks show"][..]),
        (".fqdn", &["fqdn"][..], &["API server name (.fqdn)", "settings.clusterEndpoint"][..]),
        (
            ".identityProfile",
            &["identityProfile"][..],
            &["kubelet identity (.identityProfile.kubeletidentity.clientId)", "--enable-managed-identity"][..],
        ),
        (
            ".linuxProfile",
            &["linuxProfile"][..],
            &[".linuxProfile.ssh.publicKeys[0].keyData", "SSH_PUBLIC_KEY_FILE"][..],
        ),
    ] {
        let dir = stub_dir();
        let aks = edited(dir.path(), OVERLAY_NAP, |json| {
            for key in remove {
                json.as_object_mut().unwrap().remove(*key);
            }
        });
        let out = dir.path().join("values.yaml");
        let run =
            Run::script(dir, &aks, &fixture(IDENTITY), &["shop-prod", "rg-shop", out.to_str().unwrap()], &[]);
        eprintln!("without {field}:");
        run.assert_failed(1, parts);
    }
}

#[test]
fn configure_values_stops_when_az_fails_or_arguments_are_missing() {
    // The cluster does not exist (or az is logged in elsewhere).
    let dir = stub_dir();
    let out = dir.path().join("values.yaml");
    let missing = dir.path().join("no-such-cluster.json");
    let run =
        Run::script(dir, &missing, &fixture(IDENTITY), &["shop-prod", "rg-shop", out.to_str().unwrap()], &[]);
    run.assert_failed(
        1,
        &[
            "`az aks show --name shop-prod --resource-group rg-shop` failed",
            "ResourceNotFound",
            "az account set",
        ],
    );

    // The controller's identity does not exist yet: the commands that create it came first.
    let dir = stub_dir();
    let out = dir.path().join("values.yaml");
    let missing = dir.path().join("no-such-identity.json");
    let run = Run::script(
        dir,
        &fixture(OVERLAY_NAP),
        &missing,
        &["shop-prod", "rg-shop", out.to_str().unwrap()],
        &[],
    );
    run.assert_failed(
        1,
        &[
            "`az identity show --name karpentermsi --resource-group rg-shop` failed",
            "create the identity with the commands above",
            "KARPENTER_IDENTITY",
        ],
    );
    assert!(
        run.stderr.contains(
            "az identity create --name karpentermsi --resource-group rg-shop --location westeurope"
        ),
        "{}",
        run.stderr
    );

    let run = Run::script(stub_dir(), &fixture(OVERLAY_NAP), &fixture(IDENTITY), &[], &[]);
    run.assert_failed(
        2,
        &[
            "CLUSTER_NAME and RESOURCE_GROUP are missing",
            "usage: hack/configure-values.sh CLUSTER_NAME RESOURCE_GROUP [OUTPUT_FILE]",
        ],
    );
    let run = Run::script(stub_dir(), &fixture(OVERLAY_NAP), &fixture(IDENTITY), &["shop-prod"], &[]);
    run.assert_failed(2, &["RESOURCE_GROUP is missing"]);
    assert_eq!(run.calls(), "", "nothing is asked of az");
}
