//! Least privilege: the chart grants exactly the API calls of `src/controllers` (the set below, each
//! with the code that makes the call), and the API server agrees: the ServiceAccount, authenticated with
//! the token the controller tests use, may do exactly that and is refused the neighbouring verbs and
//! resources. That the set is enough is shown by every controller test, which runs with this identity.

use std::collections::BTreeSet;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

use super::chart::render;
use super::cluster;
use super::helm::find;
use super::identity::{self, NAMESPACE};

/// (API group, resource, verbs) the ClusterRole grants, cluster-wide, and the code that needs them.
const CLUSTER_RULES: &[(&str, &str, &[&str])] = &[
    // watch.rs; termination.rs lists a node's pods and deletes them at the grace deadline.
    ("", "pods", &["list", "watch", "delete"]),
    // termination.rs drains.
    ("", "pods/eviction", &["create"]),
    // watch.rs, lifecycle.rs (registration, initialization, finalize), termination.rs taints, gc.rs.
    ("", "nodes", &["get", "list", "watch", "patch", "delete"]),
    // provisioning.rs creates, lifecycle.rs finalizes and times out, gc.rs collects, repair.rs
    // annotates and deletes; disruption/ creates replacements, reads conditions before
    // DisruptionReason, deletes disrupted and expired claims.
    ("karpenter.sh", "nodeclaims", &["get", "list", "watch", "create", "patch", "delete"]),
    // lifecycle.rs conditions.
    ("karpenter.sh", "nodeclaims/status", &["patch"]),
    // watch.rs.
    ("karpenter.sh", "nodepools", &["list", "watch"]),
    // status.rs.
    ("karpenter.sh", "nodepools/status", &["patch"]),
    // watch.rs (NodeOverlay feature gate on).
    ("karpenter.sh", "nodeoverlays", &["list", "watch"]),
    // status/nodeoverlay.rs.
    ("karpenter.sh", "nodeoverlays/status", &["patch"]),
    // watch.rs, status.rs (and its termination finalizer).
    ("karpenter.azure.com", "aksnodeclasses", &["list", "watch", "patch"]),
    // status.rs.
    ("karpenter.azure.com", "aksnodeclasses/status", &["patch"]),
    // watch.rs: DaemonSets (the overhead of a new node) and PodDisruptionBudgets.
    ("apps", "daemonsets", &["list", "watch"]),
    ("policy", "poddisruptionbudgets", &["list", "watch"]),
    // watch.rs: volume zones and the namespaces of namespaceSelector.
    ("", "persistentvolumeclaims", &["list", "watch"]),
    ("", "persistentvolumes", &["list", "watch"]),
    ("", "namespaces", &["list", "watch"]),
    ("storage.k8s.io", "storageclasses", &["list", "watch"]),
    // termination.rs: the VM waits for the drained node's VolumeAttachments.
    ("storage.k8s.io", "volumeattachments", &["list"]),
    // events.rs through kube's Recorder: create, then patch a repeat.
    ("events.k8s.io", "events", &["create", "patch"]),
];

/// The leader election Lease, in the release namespace: create any (RBAC cannot name what does not
/// exist yet), read and renew the one.
const LEASE: &str = "karpenter-leader-election";

/// Every (group, resource, verb, resourceName) a rendered Role or ClusterRole grants.
fn grants(role: &Value) -> BTreeSet<(String, String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect()).unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        assert!(rule.get("nonResourceURLs").is_none(), "no non-resource rule is needed: {rule}");
        let names = match strings(&rule["resourceNames"]) {
            names if names.is_empty() => vec![String::new()],
            names => names,
        };
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    for name in &names {
                        out.insert((group.clone(), resource.clone(), verb.clone(), name.clone()));
                    }
                }
            }
        }
    }
    out
}

fn expected_cluster_grants() -> BTreeSet<(String, String, String, String)> {
    CLUSTER_RULES
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |verb| (group.to_string(), resource.to_string(), verb.to_string(), String::new()))
        })
        .collect()
}

fn lease_grant(verb: &str, name: &str) -> (String, String, String, String) {
    ("coordination.k8s.io".into(), "leases".into(), verb.into(), name.into())
}

#[test]
fn the_chart_grants_exactly_the_calls_the_controller_makes() {
    let docs = render(&[]);
    let cluster_role = find(&docs, "ClusterRole", None);
    assert_eq!(grants(cluster_role), expected_cluster_grants());
    let role = find(&docs, "Role", None);
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    let maintenance_window = (
        String::new(),
        "configmaps".to_string(),
        "get".to_string(),
        "upcoming-maintenance-window".to_string(),
    );
    let expected: BTreeSet<_> = [
        lease_grant("create", ""),
        lease_grant("get", LEASE),
        lease_grant("update", LEASE),
        maintenance_window,
    ]
    .into();
    assert_eq!(grants(role), expected);

    // Both bind the chart's ServiceAccount, and the controller is told the Lease the Role names.
    let subject =
        serde_json::json!([{"kind": "ServiceAccount", "name": "karpenter-azure", "namespace": NAMESPACE}]);
    assert_eq!(find(&docs, "ClusterRoleBinding", None)["subjects"], subject);
    assert_eq!(find(&docs, "RoleBinding", None)["subjects"], subject);
    assert_eq!(find(&docs, "ClusterRoleBinding", None)["roleRef"]["name"], cluster_role["metadata"]["name"]);
    let env = &find(&docs, "Deployment", None)["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "LEADER_ELECTION_NAME" && e["value"] == LEASE));

    // additionalClusterRoleRules is the one way to widen it.
    let extra = render(&[
        "additionalClusterRoleRules[0].apiGroups[0]=",
        "additionalClusterRoleRules[0].resources[0]=configmaps",
        "additionalClusterRoleRules[0].verbs[0]=get",
    ]);
    let mut widened = expected_cluster_grants();
    widened.insert((String::new(), "configmaps".into(), "get".into(), String::new()));
    assert_eq!(grants(find(&extra, "ClusterRole", None)), widened);
}

/// Whether the client's own identity may do `verb` (SelfSubjectAccessReview: any authenticated user
/// may ask about itself).
async fn may(client: &Client, group: &str, resource: &str, verb: &str, namespace: &str, name: &str) -> bool {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let attributes = ResourceAttributes {
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: Some(subresource.into()).filter(|s: &String| !s.is_empty()),
        verb: Some(verb.into()),
        namespace: Some(namespace.into()).filter(|s: &String| !s.is_empty()),
        name: Some(name.into()).filter(|s: &String| !s.is_empty()),
        ..ResourceAttributes::default()
    };
    review(
        client,
        SelfSubjectAccessReviewSpec { resource_attributes: Some(attributes), ..Default::default() },
    )
    .await
}

async fn review(client: &Client, spec: SelfSubjectAccessReviewSpec) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview { spec, ..Default::default() };
    let answer = reviews.create(&PostParams::default(), &review).await.expect("SelfSubjectAccessReview");
    answer.status.expect("a review has a status").allowed
}

#[tokio::test]
async fn the_service_account_token_may_do_exactly_that_in_the_cluster() {
    let cluster = cluster::shared();
    let admin = cluster.client().await;
    let kubeconfig = identity::controller_kubeconfig(cluster, &admin).await;
    let config = kube::config::Kubeconfig::read_from(&kubeconfig).expect("the controller kubeconfig reads");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default()).await.expect("it loads");
    let client = Client::try_from(config).expect("a client with the ServiceAccount token");

    let mut wrong = Vec::new();
    for (group, resource, verbs) in CLUSTER_RULES {
        for verb in *verbs {
            if !may(&client, group, resource, verb, "", "").await {
                wrong.push(format!("refused {verb} {resource}.{group}"));
            }
        }
    }
    // The neighbours of what is granted, and what a node autoscaler must never touch.
    let refused: &[(&str, &str, &str)] = &[
        ("", "pods", "get"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "nodes", "create"),
        ("", "nodes", "update"),
        ("", "secrets", "get"),
        ("", "secrets", "list"),
        ("", "configmaps", "list"),
        ("", "serviceaccounts/token", "create"),
        ("", "events", "create"),
        ("karpenter.sh", "nodeclaims", "update"),
        ("karpenter.sh", "nodepools", "patch"),
        ("karpenter.sh", "nodepools", "delete"),
        ("karpenter.azure.com", "aksnodeclasses", "update"),
        ("karpenter.azure.com", "aksnodeclasses", "create"),
        ("apps", "daemonsets", "patch"),
        ("apps", "deployments", "list"),
        ("events.k8s.io", "events", "delete"),
        ("coordination.k8s.io", "leases", "list"),
    ];
    for (group, resource, verb) in refused {
        if may(&client, group, resource, verb, "", "").await {
            wrong.push(format!("allowed {verb} {resource}.{group}"));
        }
    }
    let lease = |verb: &'static str, namespace: &'static str, name: &'static str, allowed: bool| {
        (verb, namespace, name, allowed)
    };
    for (verb, namespace, name, allowed) in [
        lease("create", NAMESPACE, "", true),
        lease("get", NAMESPACE, LEASE, true),
        lease("update", NAMESPACE, LEASE, true),
        lease("get", NAMESPACE, "another-lease", false),
        lease("update", NAMESPACE, "another-lease", false),
        lease("delete", NAMESPACE, LEASE, false),
        lease("get", "kube-system", LEASE, false),
        lease("create", "kube-system", "", false),
    ] {
        if may(&client, "coordination.k8s.io", "leases", verb, namespace, name).await != allowed {
            wrong.push(format!(
                "{} {verb} lease {namespace}/{name}",
                if allowed { "refused" } else { "allowed" }
            ));
        }
    }
    // status.rs reads the server version; the built-in public-info-viewer role allows it to everyone.
    let version = NonResourceAttributes { path: Some("/version".into()), verb: Some("get".into()) };
    let spec = SelfSubjectAccessReviewSpec { non_resource_attributes: Some(version), ..Default::default() };
    if !review(&client, spec).await {
        wrong.push("refused GET /version".into());
    }
    assert!(
        wrong.is_empty(),
        "the ServiceAccount's permissions differ from the chart's rules:\n{}",
        wrong.join("\n")
    );
}
