#!/usr/bin/env bash
# Smoke check of the e2e control plane (hack/e2e-cluster.sh):
#   * server version is the pinned one (kubectl version, /version)
#   * a hand-made Node becomes Ready through kwok
#   * kube-scheduler binds a Pod to it and kwok makes it Running
#   * a Deployment + PodDisruptionBudget: kube-controller-manager fills the PDB status, the Eviction
#     API refuses (HTTP 429) an eviction that would break the budget and accepts (201) one that does not,
#     the ReplicaSet replaces the evicted pod, and the garbage collector removes the ReplicaSet and pods
#     when the Deployment is deleted
#   * helm can talk to the cluster
#
# Usage: hack/controlplane/smoke.sh [dir]    (default: a new temporary directory, removed afterwards)
# Set KEEP=1 to leave the cluster running.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="$HERE/../e2e-cluster.sh"

if [[ -n "${1:-}" ]]; then
  DIR="$1"; CLEAN_DIR=0
else
  DIR="$(mktemp -d "${TMPDIR:-/tmp}/karpenter-azure-smoke.XXXXXX")"; CLEAN_DIR=1
fi

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'SMOKE FAILED: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local rc=$?
  if ((rc != 0)); then
    printf 'logs are in %s/logs\n' "$DIR" >&2
    for f in "$DIR"/logs/*.log; do
      [[ -f "$f" ]] || continue
      printf -- '--- tail %s\n' "$f" >&2; tail -n 5 "$f" >&2
    done
  fi
  if [[ "${KEEP:-0}" != 1 ]]; then
    "$CLUSTER" stop "$DIR" || true
    if ((CLEAN_DIR && rc == 0)); then rm -rf "$DIR"; fi
  else
    printf 'cluster left running: source %s/env; stop with: %s stop %s\n' "$DIR" "$CLUSTER" "$DIR"
  fi
}
trap cleanup EXIT

step "start the control plane in $DIR"
"$CLUSTER" start "$DIR"
# shellcheck disable=SC1091
source "$DIR/env"
export PATH="$BIN_DIR:$PATH"
T0=$(date +%s)

retry() { # <seconds> <description> <command...>
  local secs=$1 what=$2 deadline; shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || fail "timed out after ${secs}s: $what"
    sleep 0.3
  done
}

# predicates for retry
jsonpath_is() { [[ "$(kubectl get "$1" -o jsonpath="$2")" == "$3" ]]; } # <object> <jsonpath> <value>
none_left() { [[ -z "$(kubectl get "$@" -o name)" ]]; }                 # <kubectl get args...>
gone() { ! kubectl get "$1"; }                                           # <object>

api() { # <method> <path> [json body] : prints the HTTP status, body to $DIR/last-response.json
  curl -sS -o "$DIR/last-response.json" -w '%{http_code}' -X "$1" \
    --cacert "$APISERVER_CA_FILE" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "$APISERVER_URL$2"
}

step "versions"
kubectl version
server_version="$(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
[[ "$server_version" == "$KUBERNETES_VERSION" ]] || fail "server reports $server_version, expected $KUBERNETES_VERSION"
client_version="$(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"
[[ "$client_version" == "$KUBERNETES_VERSION" ]] || fail "kubectl reports $client_version, expected $KUBERNETES_VERSION"
[[ "$(kube-apiserver --version)" == "Kubernetes $KUBERNETES_VERSION" ]] || fail "kube-apiserver --version: $(kube-apiserver --version)"
etcd_version="$(etcd --version)"; echo "${etcd_version%%$'\n'*}"
kwok --version
helm version --short
helm list --all-namespaces >/dev/null || fail "helm cannot reach the API server"

step "create a fake node (kwok fakes its kubelet)"
kubectl create -f - <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: smoke-node-0
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: smoke-node-0
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: Standard_D4s_v5
    topology.kubernetes.io/zone: westeurope-1
spec:
  providerID: azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/smoke/providers/Microsoft.Compute/virtualMachines/smoke-node-0
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi}
  allocatable: {cpu: "3860m", memory: 14Gi, pods: "110", ephemeral-storage: 90Gi}
EOF
kubectl wait --for=condition=Ready node/smoke-node-0 --timeout=60s
# the node lifecycle controller removes the node.kubernetes.io/not-ready taint once the node is Ready
retry 60 "not-ready taint removed from smoke-node-0" jsonpath_is node/smoke-node-0 '{.spec.taints}' ""
kubectl get node smoke-node-0 -o wide

step "a pod is bound by kube-scheduler and made Running by kwok"
kubectl create -f - <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: smoke-pod
spec:
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: 100m, memory: 64Mi}
EOF
kubectl wait --for=jsonpath='{.status.phase}'=Running pod/smoke-pod --timeout=60s
[[ "$(kubectl get pod smoke-pod -o jsonpath='{.spec.nodeName}')" == smoke-node-0 ]] || fail "pod not bound to smoke-node-0"
scheduled_events="$(kubectl get events --field-selector involvedObject.name=smoke-pod,reason=Scheduled -o name)"
[[ -n "$scheduled_events" ]] || fail "no Scheduled event from kube-scheduler for smoke-pod"
kubectl get pod smoke-pod -o wide

step "deployment + PodDisruptionBudget + eviction"
kubectl create -f - <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smoke-app
spec:
  replicas: 3
  selector:
    matchLabels: {app: smoke-app}
  template:
    metadata:
      labels: {app: smoke-app}
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: smoke-app
spec:
  minAvailable: 3
  selector:
    matchLabels: {app: smoke-app}
EOF
kubectl rollout status deployment/smoke-app --timeout=90s
pdb_status() { kubectl get pdb smoke-app -o jsonpath="$PDB_STATUS"; }
PDB_STATUS='{.status.expectedPods}/{.status.currentHealthy}/{.status.desiredHealthy}/{.status.disruptionsAllowed}'
retry 60 "PDB status expectedPods/currentHealthy/desiredHealthy/disruptionsAllowed = 3/3/3/0" \
  jsonpath_is pdb/smoke-app "$PDB_STATUS" 3/3/3/0
echo "PDB status (expected/healthy/desired/allowed): $(pdb_status)"

victim="$(kubectl get pods -l app=smoke-app -o jsonpath='{.items[0].metadata.name}')"
eviction() { printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"default"}}' "$1"; }
code="$(api POST "/api/v1/namespaces/default/pods/$victim/eviction" "$(eviction "$victim")")"
echo "eviction of $victim with disruptionsAllowed=0 -> HTTP $code: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("message",""))' "$DIR/last-response.json")"
[[ "$code" == 429 ]] || fail "expected HTTP 429 from the eviction API, got $code"

kubectl patch pdb smoke-app --type=merge -p '{"spec":{"minAvailable":2}}'
retry 60 "PDB disruptionsAllowed = 1" jsonpath_is pdb/smoke-app '{.status.disruptionsAllowed}' 1
echo "PDB status after minAvailable=2: $(pdb_status)"
code="$(api POST "/api/v1/namespaces/default/pods/$victim/eviction" "$(eviction "$victim")")"
echo "eviction of $victim with disruptionsAllowed=1 -> HTTP $code"
[[ "$code" == 201 ]] || fail "expected HTTP 201 from the eviction API, got $code: $(cat "$DIR/last-response.json")"
retry 60 "evicted pod $victim gone" gone "pod/$victim"
retry 60 "deployment back to 3 available replicas" \
  jsonpath_is deployment/smoke-app '{.status.availableReplicas}' 3
retry 60 "PDB healthy again (3/3/2/1)" jsonpath_is pdb/smoke-app "$PDB_STATUS" 3/3/2/1
kubectl get pods -l app=smoke-app -o wide

step "garbage collector removes the ReplicaSet and pods of a deleted Deployment"
kubectl delete deployment smoke-app --wait=false
retry 60 "ReplicaSets of smoke-app gone" none_left rs -l app=smoke-app
retry 60 "pods of smoke-app gone" none_left pods -l app=smoke-app

step "SMOKE OK (checks took $(($(date +%s) - T0))s)"
