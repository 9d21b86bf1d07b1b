//! Unit tests of the Kubernetes-to-solver conversion, on pods written as YAML.

use super::*;
use crate::model::labels::LABEL_ZONE;
use crate::model::resources::{CPU, MEMORY, NODES, PODS};
use crate::scheduling::input::{HostPort, TolerationOperator, WhenUnsatisfiable};

fn pod_yaml(spec: &str) -> crate::scheduling::Pod {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, labels: {{app: web, version: v2}}}}\nspec:\n{spec}"
    );
    let p: core::Pod = serde_yaml::from_str(&text).expect("test pod parses");
    from_pod(&p, &PodContext::default()).expect("converts")
}

fn pod_err(spec: &str) -> FromK8sError {
    let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}");
    let p: core::Pod = serde_yaml::from_str(&text).expect("test pod parses");
    from_pod(&p, &PodContext::default()).unwrap_err()
}

const GI: i64 = 1 << 30;

#[test]
fn requests_sum_containers_and_take_the_largest_init_container() {
    let p = pod_yaml(
        "  containers:
  - {name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  - {name: b, resources: {requests: {cpu: 250m}}}
  initContainers:
  - {name: migrate, resources: {requests: {cpu: '2', memory: 512Mi}}}
",
    );
    // cpu: max(750m, 2000m); memory: max(1Gi, 512Mi).
    assert_eq!(p.requests, Resources::new().with(CPU, 2000).with(MEMORY, GI).with(PODS, 1));
}

#[test]
fn sidecar_init_containers_add_to_the_sum_and_to_later_init_containers() {
    let p = pod_yaml(
        "  containers:
  - {name: app, resources: {requests: {cpu: '1'}}}
  initContainers:
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 300m}}}
  - {name: setup, resources: {requests: {cpu: '1'}}}
",
    );
    // Sum: 1000 + 300 (sidecar); the one-shot init runs beside the sidecar: 1000 + 300. Both 1300m.
    assert_eq!(p.requests.get(CPU), 1300);
    let p = pod_yaml(
        "  containers:
  - {name: app, resources: {requests: {cpu: 100m}}}
  initContainers:
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 300m}}}
  - {name: setup, resources: {requests: {cpu: '2'}}}
",
    );
    assert_eq!(p.requests.get(CPU), 2300);
}

#[test]
fn overhead_and_limits_only_and_pod_level_resources() {
    let p = pod_yaml(
        "  overhead: {cpu: 250m, memory: 120Mi}
  containers:
  - {name: a, resources: {limits: {cpu: '1', memory: 1Gi}}}
",
    );
    assert_eq!(p.requests.get(CPU), 1250);
    assert_eq!(p.requests.get(MEMORY), GI + (120 << 20));
    assert_eq!(p.requests.get(PODS), 1);
    let p = pod_yaml(
        "  resources: {requests: {cpu: '3'}}
  containers:
  - {name: a, resources: {requests: {cpu: '1', memory: 1Gi}}}
",
    );
    assert_eq!((p.requests.get(CPU), p.requests.get(MEMORY)), (3000, GI));
}

#[test]
fn node_selector_is_merged_into_every_required_term() {
    let p = pod_yaml(
        "  nodeSelector: {kubernetes.io/arch: amd64}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [eastus-1]}]
        - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 10, preference: {matchExpressions: [{key: a, operator: Exists}]}}
      - {weight: 90, preference: {matchExpressions: [{key: b, operator: Exists}]}}
  containers: [{name: a}]
",
    );
    assert_eq!(p.required_terms.len(), 2);
    for term in &p.required_terms {
        assert!(term.get("kubernetes.io/arch").is_some(), "{term}");
    }
    assert!(p.required_terms[0].get(LABEL_ZONE).is_some());
    assert_eq!(p.preferred_terms.iter().map(|w| w.weight).collect::<Vec<_>>(), vec![90, 10]);
    let only_selector = pod_yaml("  nodeSelector: {a: b}\n  containers: [{name: a}]\n");
    assert_eq!(only_selector.required_terms, vec![Requirements::from_labels([(&"a".into(), &"b".into())])]);
    assert!(pod_yaml("  containers: [{name: a}]\n").required_terms.is_empty());
}

#[test]
fn match_fields_is_refused_with_its_path_but_ignored_on_bound_pods() {
    let affinity = "  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchFields: [{key: metadata.name, operator: In, values: [node-1]}]
  containers: [{name: a}]
";
    let err = pod_err(affinity);
    assert!(err.to_string().contains("nodeSelectorTerms[0].matchFields"), "{err}");
    assert_eq!(err.category(), "Unsupported");
    let bound = pod_yaml(&format!("  nodeName: node-1\n{affinity}"));
    assert_eq!(bound.node_name.as_deref(), Some("node-1"));
    assert!(bound.required_terms.is_empty());
}

#[test]
fn a_bound_pod_keeps_its_node_selector_for_when_it_is_moved() {
    let bound = pod_yaml(
        "  nodeName: node-1\n  nodeSelector: {karpenter.sh/nodepool: batch}\n  containers: [{name: a}]\n",
    );
    assert_eq!(bound.required_terms.len(), 1);
    assert!(!bound.required_terms[0]
        .matches(&BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())])));
}

#[test]
fn match_label_keys_fold_the_pods_own_values_into_the_spread_selector() {
    let p = pod_yaml(
        "  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    minDomains: 3
    labelSelector: {matchLabels: {app: web}}
    matchLabelKeys: [version, absent-key]
  containers: [{name: a}]
",
    );
    let spread = &p.topology_spread[0];
    assert_eq!((spread.max_skew, spread.min_domains), (1, Some(3)));
    assert_eq!(spread.when_unsatisfiable, WhenUnsatisfiable::DoNotSchedule);
    let v2 = BTreeMap::from([("app".to_string(), "web".to_string()), ("version".into(), "v2".into())]);
    let v1 = BTreeMap::from([("app".to_string(), "web".to_string()), ("version".into(), "v1".into())]);
    assert!(spread.selector.matches(&v2));
    assert!(!spread.selector.matches(&v1));
    assert!(spread.selector.get("absent-key").is_none());
}

#[test]
fn tolerations_keep_operator_key_and_effect() {
    let p = pod_yaml(
        "  tolerations:
  - {key: dedicated, value: gpu, effect: NoSchedule}
  - {operator: Exists}
  - {key: spot, operator: Exists, effect: NoExecute}
  containers: [{name: a}]
",
    );
    let t = &p.tolerations;
    assert_eq!(t[0].operator, TolerationOperator::Equal);
    assert_eq!((t[0].key.as_deref(), t[0].value.as_deref()), (Some("dedicated"), Some("gpu")));
    assert_eq!(t[0].effect, Some(TaintEffect::NoSchedule));
    assert_eq!((t[1].key.as_deref(), t[1].operator, t[1].effect), (None, TolerationOperator::Exists, None));
    assert_eq!(t[2].effect, Some(TaintEffect::NoExecute));
    let err = pod_err("  tolerations: [{key: a, effect: Sometimes}]\n  containers: [{name: a}]\n");
    assert!(err.to_string().contains("tolerations[0].effect"), "{err}");
}

#[test]
fn host_ports_default_protocol_and_address() {
    let p = pod_yaml(
        "  containers:
  - name: a
    ports:
    - {containerPort: 80, hostPort: 8080}
    - {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}
    - {containerPort: 9090}
",
    );
    assert_eq!(
        p.host_ports,
        vec![
            HostPort { port: 53, protocol: "UDP".into(), host_ip: "10.0.0.1".into() },
            HostPort { port: 8080, protocol: "TCP".into(), host_ip: String::new() },
        ]
    );
}

#[test]
fn affinity_namespaces_default_to_the_pods_own() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, labels: {app: web}}
spec:
  containers: [{name: a}]
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
      - {topologyKey: kubernetes.io/hostname, labelSelector: {}, namespaceSelector: {}}
";
    let p: core::Pod = serde_yaml::from_str(text).unwrap();
    let ctx =
        PodContext { namespaces: ["ns", "other"].iter().map(|n| (n.to_string(), BTreeMap::new())).collect() };
    let converted = from_pod(&p, &ctx).unwrap();
    assert_eq!(converted.anti_affinity[0].namespaces, vec!["ns".to_string()]);
    assert_eq!(converted.anti_affinity[1].namespaces, vec!["ns".to_string(), "other".into()]);
    assert_eq!(converted.owner, None);
}

#[test]
fn templates_expand_to_named_replicas() {
    let template: core::PodTemplateSpec = serde_yaml::from_str(
        "metadata: {labels: {app: web}}\nspec: {containers: [{name: a, resources: {requests: {cpu: 1}}}]}",
    )
    .unwrap();
    let pods = template_pods(&template, "default", "Deployment", "web", 3, &PodContext::default()).unwrap();
    let names: Vec<String> = pods.iter().map(|p| p.id()).collect();
    assert_eq!(names, ["default/web-0", "default/web-1", "default/web-2"]);
    assert_eq!(pods[2].owner.as_deref(), Some("Deployment/web"));
    assert_eq!(pods[2].labels["app"], "web");
}

#[test]
fn nodepool_limits_subtract_what_its_nodes_use() {
    let pool: NodePool = serde_yaml::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}
spec:
  limits: {cpu: 100, nodes: 10}
  template:
    metadata: {labels: {team: a}}
    spec: {nodeClassRef: {name: default}}",
    )
    .unwrap();
    let used = Resources::new().with(CPU, 8000).with(MEMORY, 32 * GI).with(NODES, 2);
    let input = nodepool(&pool, &used, Arc::new(vec![])).unwrap();
    assert_eq!(input.remaining, Some(Resources::new().with(CPU, 92_000).with(NODES, 8)));
    assert_eq!(input.weight, 0);
    assert_eq!(input.labels["karpenter.sh/nodepool"], "general");
    assert_eq!(input.requirements.get("team").and_then(|r| r.single_value()), Some("a"));
    assert_eq!(input.requirements.get(LABEL_NODEPOOL).and_then(|r| r.single_value()), Some("general"));
}

#[test]
fn cordoned_nodes_get_the_unschedulable_taint() {
    let n: core::Node = serde_yaml::from_str(
        "metadata: {name: n1, labels: {karpenter.sh/nodepool: general}}
spec: {unschedulable: true}
status: {capacity: {cpu: '4', memory: 16Gi, pods: '110'}}",
    )
    .unwrap();
    let node = node(&n).unwrap();
    assert_eq!(node.nodepool.as_deref(), Some("general"));
    assert_eq!(node.allocatable.get(CPU), 4000);
    assert_eq!(node.taints[0].key, TAINT_UNSCHEDULABLE);
    assert_eq!(node_capacity(&n).unwrap().get(NODES), 1);
}
