//! Upstream's values files, unchanged, install this chart (`helm template`; two tests ask the e2e
//! control plane: for NOTES, which helm renders only on install, and for a server-side dry run of the
//! Deployment): every key of upstream's chart values is accepted, each with a meaning here is
//! implemented, the others are listed in NOTES as having no effect, and the settings of upstream's
//! self-hosted values template (passed through controller.env) reach the controller once each, under
//! names it reads, and validate.
//!
//! The fixtures restate upstream's files (tests/fixtures/upstream/, each naming its source and commit).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::chart::{pod_spec, render, render_result};
use super::chart_settings::{controller_env_names, env};
use super::cluster;
use super::helm::{find, Helm, CHART, CI_VALUES};

/// Upstream's charts/karpenter/values.yaml, keys and defaults.
const UPSTREAM_VALUES: &str = "tests/fixtures/upstream/values.yaml";
/// Upstream's karpenter-values-template.yaml as hack/deploy/configure-values.sh fills it.
const UPSTREAM_TEMPLATE: &str = "tests/fixtures/upstream/karpenter-values.yaml";
/// Where a user of upstream's files puts this controller's image.
const OUR_IMAGE: &str = "--set=controller.image.repository=myregistry.azurecr.io/karpenter-azure";

/// The chart rendered with only the given values files and flags (not the CI values).
fn render_files(args: &[&str]) -> Result<Vec<Value>, String> {
    Helm::offline().template(args)
}

/// The controller container.
fn container(docs: &[Value]) -> &Value {
    &pod_spec(docs)["containers"][0]
}

/// What the pod's environment holds once running: literal values, the namespace for field
/// references, a bootstrap token for Secret references, and what the workload identity webhook
/// injects (the chart's pod label asks for it).
pub fn running_env(rendered: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = rendered
        .iter()
        .map(|(name, value)| {
            let value = if value.starts_with("field:") {
                "karpenter".to_string()
            } else if value.starts_with("secret:") {
                "abcdef.0123456789abcdef".to_string()
            } else {
                value.clone()
            };
            (name.clone(), value)
        })
        .collect();
    for (name, value) in [
        ("AZURE_CLIENT_ID", "00000000-0000-0000-0000-00000000c11e"),
        ("AZURE_TENANT_ID", "00000000-0000-0000-0000-000000000002"),
        ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/azure-identity-token"),
    ] {
        env.entry(name.to_string()).or_insert_with(|| value.to_string());
    }
    env
}

/// The controller's own parsing and validation of an environment.
pub fn controller_validates(
    env: &BTreeMap<String, String>,
) -> Result<karpenter_azure::operator::Validated, karpenter_azure::operator::OptionsError> {
    karpenter_azure::operator::Options::parse_from(["karpenter-azure"], env)?.validate()
}

/// Every variable of `env` is one the controller reads (its `--help` lists it).
pub fn assert_all_read(env: &BTreeMap<String, String>) {
    let known = controller_env_names();
    let unknown: Vec<&String> = env.keys().filter(|name| !known.contains(*name)).collect();
    assert!(unknown.is_empty(), "variables the controller does not read: {unknown:?}");
}

#[test]
fn upstreams_values_file_is_accepted_whole_and_keeps_its_meaning() {
    // Upstream's file after the CI values, as a user would layer it, plus the two settings upstream's
    // chart takes under `settings`.
    let docs = render(&[
        &format!("--values={UPSTREAM_VALUES}"),
        "settings.clusterName=prod",
        "settings.clusterEndpoint=https://prod-dns.hcp.eastus.azmk8s.io:443",
    ]);
    let pod = pod_spec(&docs);
    let controller = container(&docs);
    assert_eq!(controller["name"], "controller");
    assert_eq!(
        controller["image"],
        "mcr.microsoft.com/aks/karpenter/controller:1.10.2@sha256:\
         de1354078031cd1beeacb0a59114bd5f6cb3c6028591129dc5d5a34842a32ad7",
        "controller.image is where upstream's values name the image"
    );
    assert_eq!(controller["imagePullPolicy"], "IfNotPresent");
    assert_eq!(pod["schedulerName"], "default-scheduler");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert!(pod.get("hostNetwork").is_none() && pod.get("dnsConfig").is_none(), "{pod:#}");
    assert!(pod.get("terminationGracePeriodSeconds").is_none(), "upstream's null keeps Kubernetes' default");
    assert!(pod.get("volumes").is_none() && pod.get("initContainers").is_none());
    assert_eq!(pod["containers"].as_array().map(Vec::len), Some(1), "no sidecar");
    // Upstream's empty appArmorProfile, seLinuxOptions and seccompProfile would be refused by the API
    // server; the chart's own hardening stays.
    assert_eq!(
        controller["securityContext"],
        json!({"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
               "capabilities": {"drop": ["ALL"]}})
    );
    assert!(controller.get("envFrom").is_none() && controller.get("volumeMounts").is_none());
    let budget = find(&docs, "PodDisruptionBudget", None);
    assert_eq!(budget["metadata"]["name"], "karpenter", "podDisruptionBudget.name");
    assert_eq!(find(&docs, "Deployment", None)["spec"]["replicas"], 2);

    let rendered = env(&docs);
    assert_eq!(rendered["CLUSTER_NAME"], "prod");
    assert_eq!(
        rendered["FEATURE_GATES"],
        "NodeOverlay=false,NodeRepair=false,ReservedCapacity=false,SpotToSpotConsolidation=false,\
         StaticCapacity=false"
    );
    assert!(!rendered.contains_key("CLUSTER_CA_BUNDLE") && !rendered.contains_key("MIN_VALUES_POLICY"));
    assert_all_read(&rendered);
    controller_validates(&running_env(&rendered)).unwrap_or_else(|e| panic!("the controller refuses: {e}"));
}

#[test]
fn upstreams_keys_with_a_meaning_here_are_implemented() {
    let docs = render(&[
        &format!("--values={UPSTREAM_VALUES}"),
        "settings.clusterName=prod",
        "settings.clusterEndpoint=https://prod-dns.hcp.eastus.azmk8s.io:443",
        "imagePullPolicy=Always",
        "controller.containerName=karpenter",
        "controller.image.tag=0.2.0",
        "controller.image.digest=null",
        "hostNetwork=true",
        "dnsPolicy=ClusterFirstWithHostNet",
        "dnsConfig.options[0].name=ndots",
        "--set-string=dnsConfig.options[0].value=1",
        "schedulerName=my-scheduler",
        "terminationGracePeriodSeconds=90",
        "extraVolumes[0].name=ca",
        "extraVolumes[0].configMap.name=corp-ca",
        "controller.extraVolumeMounts[0].name=ca",
        "controller.extraVolumeMounts[0].mountPath=/etc/corp-ca",
        "controller.sidecarContainer[0].name=proxy",
        "controller.sidecarContainer[0].image=proxy:1",
        "controller.sidecarVolumeMounts[0].name=ca",
        "controller.sidecarVolumeMounts[0].mountPath=/ca",
        "initContainers[0].name=wait",
        "initContainers[0].image=busybox:1",
        "controller.envFrom[0].configMapRef.name=karpenter-extra",
        "controller.securityContext.seccompProfile.type=RuntimeDefault",
        "serviceMonitor.enabled=true",
        "serviceMonitor.relabelings[0].targetLabel=cluster",
        "serviceMonitor.relabelings[0].replacement=prod",
        "serviceMonitor.metricRelabelings[0].action=drop",
        "serviceMonitor.metricRelabelings[0].regex=go_.*",
        "serviceMonitor.sampleLimit=5000",
    ]);
    let pod = pod_spec(&docs);
    let controller = container(&docs);
    assert_eq!(controller["name"], "karpenter");
    assert_eq!(controller["image"], "mcr.microsoft.com/aks/karpenter/controller:0.2.0");
    assert_eq!(controller["imagePullPolicy"], "Always");
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["dnsConfig"], json!({"options": [{"name": "ndots", "value": "1"}]}));
    assert_eq!(pod["schedulerName"], "my-scheduler");
    assert_eq!(pod["terminationGracePeriodSeconds"], 90);
    assert_eq!(pod["volumes"], json!([{"name": "ca", "configMap": {"name": "corp-ca"}}]));
    assert_eq!(pod["initContainers"], json!([{"name": "wait", "image": "busybox:1"}]));
    assert_eq!(controller["volumeMounts"], json!([{"name": "ca", "mountPath": "/etc/corp-ca"}]));
    assert_eq!(controller["envFrom"], json!([{"configMapRef": {"name": "karpenter-extra"}}]));
    assert_eq!(controller["securityContext"]["seccompProfile"], json!({"type": "RuntimeDefault"}));
    assert_eq!(controller["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        pod["containers"][1],
        json!({"name": "proxy", "image": "proxy:1", "volumeMounts": [
            {"name": "ca", "mountPath": "/etc/corp-ca"}, {"name": "ca", "mountPath": "/ca"}
        ]}),
        "a sidecar mounts extraVolumeMounts and sidecarVolumeMounts"
    );
    let monitor = find(&docs, "ServiceMonitor", None);
    assert_eq!(monitor["spec"]["sampleLimit"], 5000);
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "http-metrics", "path": "/metrics",
                "relabelings": [{"targetLabel": "cluster", "replacement": "prod"}],
                "metricRelabelings": [{"action": "drop", "regex": "go_.*"}]}])
    );
}

#[test]
fn upstreams_self_hosted_values_template_reaches_the_controller_once_per_setting() {
    let docs = render_files(&["--values", UPSTREAM_TEMPLATE, OUR_IMAGE]).unwrap_or_else(|e| panic!("{e}"));
    // env() fails on a name set twice.
    let rendered = env(&docs);
    let from_template: BTreeMap<&str, &str> = [
        ("DISABLE_LEADER_ELECTION", "true"),
        ("CLUSTER_NAME", "prod"),
        ("CLUSTER_ENDPOINT", "https://prod-dns-1234abcd.hcp.eastus.azmk8s.io:443"),
        ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
        ("NETWORK_PLUGIN", "azure"),
        ("NETWORK_PLUGIN_MODE", "overlay"),
        ("NETWORK_POLICY", ""),
        ("NETWORK_DATAPLANE", "cilium"),
        ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001"),
        ("LOCATION", "eastus"),
        ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_prod_eastus"),
        ("ARM_RESOURCE_GROUP", "rg"),
        ("PROVISION_MODE", "aksscriptless"),
        ("USE_SIG", "false"),
    ]
    .into_iter()
    .collect();
    for (name, value) in from_template {
        assert_eq!(rendered.get(name).map(String::as_str), Some(value), "{name}");
    }
    // The chart's own variables for what the template leaves out.
    assert_eq!(
        rendered["FEATURE_GATES"],
        "NodeRepair=false,SpotToSpotConsolidation=false,StaticCapacity=true"
    );
    assert_eq!(rendered["LOG_LEVEL"], "info");
    assert_eq!(rendered["LINUX_ADMIN_USERNAME"], "azureuser");
    assert_eq!(pod_spec(&docs)["serviceAccountName"], "karpenter-sa");
    assert_eq!(find(&docs, "Deployment", None)["spec"]["replicas"], 1);
    assert!(!docs.iter().any(|d| d["kind"] == "Secret"), "the token came as a value of controller.env");

    assert_all_read(&rendered);
    let v = controller_validates(&running_env(&rendered))
        .unwrap_or_else(|e| panic!("the controller refuses: {e}"));
    assert_eq!(v.cluster_name, "prod");
    assert!(v.leader_election.is_none());
    assert!(v.feature_gates.enabled_unimplemented.is_empty());
    assert!(v.feature_gates.static_capacity, "upstream's template turns static NodePools on");
    let warned: Vec<&str> = v.without_effect.iter().map(|w| w.setting.env).collect();
    assert_eq!(warned, ["AKS_MACHINES_POOL_NAME", "ENABLE_AZURE_SDK_LOGGING"]);
}

#[test]
fn a_variable_in_controller_env_replaces_the_one_the_chart_derives_from_settings() {
    let docs = render(&[
        "settings.networkPolicy=cilium",
        "controller.env[0].name=NETWORK_PLUGIN",
        "controller.env[0].value=none",
        "controller.env[1].name=NETWORK_PLUGIN_MODE",
        "controller.env[1].value=",
        "controller.env[2].name=CLUSTER_NAME",
        "controller.env[2].value=from-env",
    ]);
    let rendered = env(&docs);
    assert_eq!(rendered["NETWORK_PLUGIN"], "none");
    assert_eq!(rendered["NETWORK_PLUGIN_MODE"], "");
    assert_eq!(rendered["CLUSTER_NAME"], "from-env");
    assert_eq!(rendered["NETWORK_POLICY"], "cilium", "settings not named in controller.env stay");
    // controller.env comes last, in its own order.
    let names: Vec<String> = pod_spec(&docs)["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names[names.len() - 3..], ["NETWORK_PLUGIN", "NETWORK_PLUGIN_MODE", "CLUSTER_NAME"]);

    // The cross-check applies to what the controller will see.
    let err = render_result(&["controller.env[0].name=NETWORK_PLUGIN", "controller.env[0].value=none"])
        .expect_err("none with the overlay mode of settings");
    assert!(
        err.contains(
            "NETWORK_PLUGIN_MODE (settings.networkPluginMode) must be \"\" when NETWORK_PLUGIN is none"
        ),
        "{err}"
    );
}

#[test]
fn a_required_setting_may_come_from_controller_env_or_env_from() {
    // Each required setting given in controller.env instead.
    for (value, variable, given) in [
        ("settings.clusterName=", "CLUSTER_NAME", "prod"),
        ("settings.location=", "LOCATION", "westeurope"),
        ("settings.kubeletBootstrapTokenSecret.name=", "KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
    ] {
        let rendered = env(&render(&[
            value,
            &format!("controller.env[0].name={variable}"),
            &format!("controller.env[0].value={given}"),
        ]));
        assert_eq!(rendered[variable], given, "{variable}");
    }
    // A reference in controller.env is kept as written.
    let rendered = env(&render(&[
        "settings.kubeletBootstrapTokenSecret.name=",
        "controller.env[0].name=KUBELET_BOOTSTRAP_TOKEN",
        "controller.env[0].valueFrom.secretKeyRef.name=bootstrap",
        "controller.env[0].valueFrom.secretKeyRef.key=token",
    ]));
    assert_eq!(rendered["KUBELET_BOOTSTRAP_TOKEN"], "secret:bootstrap/token");
    let err = render_result(&["settings.clusterName="]).expect_err("nothing gives CLUSTER_NAME");
    assert!(err.contains("settings.clusterName is required (CLUSTER_NAME): the AKS cluster's name; or give CLUSTER_NAME in controller.env"), "{err}");

    // With envFrom the chart cannot see the values: nothing is required at render time, and the
    // controller names what is missing when it starts.
    let docs = render_files(&[OUR_IMAGE, "--set=controller.envFrom[0].secretRef.name=karpenter-settings"])
        .unwrap_or_else(|e| panic!("{e}"));
    let rendered = env(&docs);
    for name in ["CLUSTER_NAME", "CLUSTER_ENDPOINT", "LOCATION", "KUBELET_BOOTSTRAP_TOKEN", "SSH_PUBLIC_KEY"]
    {
        assert!(!rendered.contains_key(name), "{name} is set: {rendered:?}");
    }
    assert_eq!(container(&docs)["envFrom"], json!([{"secretRef": {"name": "karpenter-settings"}}]));
    let err = controller_validates(&running_env(&rendered)).expect_err("nothing gives the settings");
    assert_eq!(err.to_string(), "missing setting --cluster-endpoint (CLUSTER_ENDPOINT)");
}

#[test]
fn the_cluster_ca_bundle_is_read_under_both_spellings() {
    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t";
    for key in ["clusterCaBundle", "clusterCABundle"] {
        let rendered = env(&render(&[&format!("settings.{key}={CA}")]));
        assert_eq!(rendered["CLUSTER_CA_BUNDLE"], CA, "settings.{key}");
    }
    let same =
        env(&render(&[&format!("settings.clusterCaBundle={CA}"), &format!("settings.clusterCABundle={CA}")]));
    assert_eq!(same["CLUSTER_CA_BUNDLE"], CA);
    let err = render_result(&[&format!("settings.clusterCaBundle={CA}"), "settings.clusterCABundle=other"])
        .expect_err("two different bundles");
    assert!(err.contains("under two spellings: set one of them"), "{err}");
}

#[test]
fn the_settings_upstream_lacks_a_chart_value_for_have_one_here() {
    const DES: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/keys/providers/\
                       Microsoft.Compute/diskEncryptionSets/node-disks";
    let rendered = env(&render(&[
        &format!("settings.nodeOsDiskEncryptionSetId={DES}"),
        "settings.minValuesPolicy=BestEffort",
        "settings.preferencePolicy=Respect",
    ]));
    assert_eq!(rendered["NODE_OSDISK_DISKENCRYPTIONSET_ID"], DES);
    assert_eq!(rendered["MIN_VALUES_POLICY"], "BestEffort");
    assert_eq!(rendered["PREFERENCE_POLICY"], "Respect");
    assert_all_read(&rendered);
    let v = controller_validates(&running_env(&rendered)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.os_disk_encryption_set_id.as_deref(), Some(DES));
    for (set, message) in [
        (
            "settings.nodeOsDiskEncryptionSetId=/subscriptions/x/resourceGroups/y",
            "/settings/nodeOsDiskEncryptionSetId",
        ),
        ("settings.minValuesPolicy=Lenient", "/settings/minValuesPolicy"),
    ] {
        let err = render_result(&[set]).expect_err(set);
        assert!(err.contains(message), "{set}: {err}");
    }
}

#[test]
fn notes_list_the_upstream_values_that_have_no_effect_here() {
    let helm = Helm::for_cluster(cluster::shared());
    let notes = |values: &[&str]| {
        let base = [
            "install",
            "notes-check",
            CHART,
            "--namespace",
            "karpenter",
            "--dry-run=client",
            "--values",
            CI_VALUES,
        ];
        let out = helm.run(&[&base[..], values].concat()).unwrap_or_else(|e| panic!("{e}"));
        out.split_once("NOTES:")
            .map(|(_, notes)| notes.to_string())
            .unwrap_or_else(|| panic!("no NOTES in:\n{out}"))
    };
    let upstream = notes(&[
        "--values",
        UPSTREAM_VALUES,
        "--set",
        "settings.clusterName=prod,settings.clusterEndpoint=https://prod-dns.hcp.eastus.azmk8s.io:443",
        "--set",
        "settings.featureGates.reservedCapacity=true,settings.featureGates.staticCapacity=true",
    ]);
    assert!(upstream.contains("for cluster prod."), "{upstream}");
    assert!(upstream.contains("have no effect here:"), "{upstream}");
    for key in [
        "  - webhook: ",
        "  - logOutputPaths: ",
        "  - logErrorOutputPaths: ",
        "  - settings.ignoreDRARequests: ",
        "  - settings.disableClusterStateObservability: ",
        "  - settings.featureGates.reservedCapacity: ",
    ] {
        assert!(upstream.contains(key), "{key:?} missing from NOTES:\n{upstream}");
    }
    assert!(!upstream.contains("staticCapacity"), "static NodePools are implemented:\n{upstream}");
    assert!(upstream.contains("is upstream's controller"), "the upstream image is pointed out:\n{upstream}");

    let ours = notes(&[]);
    assert!(!ours.contains("no effect") && !ours.contains("upstream's controller"), "{ours}");
    let from_env = notes(&["--values", UPSTREAM_TEMPLATE, OUR_IMAGE]);
    assert!(from_env.contains("for cluster prod."), "CLUSTER_NAME from controller.env:\n{from_env}");
}

#[test]
fn tags_that_are_numbers_or_booleans_are_written_as_text_as_upstreams_chart_does() {
    let rendered =
        env(&render(&["settings.tags.cost-center=42", "settings.tags.prod=true", "settings.tags.team=blue"]));
    assert_eq!(rendered["ADDITIONAL_TAGS"], "cost-center=42,prod=true,team=blue");
}

#[tokio::test]
async fn the_api_server_accepts_the_deployment_upstreams_values_render() {
    // A server-side dry run of the Deployment: the API server validates it as it would on install (the
    // container's security context without upstream's empty profiles, the sidecar, the volumes) and
    // stores nothing.
    let client = cluster::shared().client().await;
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "default");
    let extra = [
        "extraVolumes[0].name=ca",
        "extraVolumes[0].configMap.name=corp-ca",
        "controller.extraVolumeMounts[0].name=ca",
        "controller.extraVolumeMounts[0].mountPath=/etc/corp-ca",
        "controller.sidecarContainer[0].name=proxy",
        "controller.sidecarContainer[0].image=proxy:1",
        "controller.envFrom[0].configMapRef.name=karpenter-extra",
    ];
    let upstream_values = format!("--values={UPSTREAM_VALUES}");
    let upstream_template = format!("--values={UPSTREAM_TEMPLATE}");
    for values in [
        vec![
            upstream_values.as_str(),
            "settings.clusterName=prod",
            "settings.clusterEndpoint=https://prod:443",
        ],
        vec![upstream_template.as_str(), OUR_IMAGE],
    ] {
        let docs = render(&[&values[..], &extra].concat());
        let mut deployment = find(&docs, "Deployment", None).clone();
        deployment["metadata"]["namespace"] = json!("default");
        let deployment = serde_json::from_value(deployment).expect("a Deployment");
        let params = kube::api::PostParams { dry_run: true, ..Default::default() };
        deployments
            .create(&params, &deployment)
            .await
            .unwrap_or_else(|e| panic!("the API server refuses the Deployment of {values:?}: {e}"));
    }
}
