#!/usr/bin/env bash
# Writes a Helm values file for charts/karpenter-azure from an AKS cluster, as upstream's
# hack/deploy/configure-values.sh does for its chart (Azure/karpenter-provider-azure).
#
#   hack/configure-values.sh CLUSTER_NAME RESOURCE_GROUP [OUTPUT_FILE]
#
# OUTPUT_FILE defaults to karpenter-values.yaml. The values come from
#   az aks show                   endpoint (fqdn, or privateFqdn of a private cluster), subscription,
#                                 location, node resource group, network plugin / mode / policy /
#                                 dataplane, DNS service IP, kubelet identity, SSH key, OIDC issuer
#   az network vnet show|list     the nodes' subnet (a VNet of the cluster's own, or the one AKS made in
#                                 the node resource group) and the VNet's GUID
#   az identity show              the client ID of the controller's user-assigned identity (workload identity)
# The bootstrap token is referenced as a Secret the commands printed on stderr create; the cluster CA is
# left to the controller (the CA of its own service account is the cluster's on AKS).
#
# On stderr: a warning when Node Auto Provisioning is on (AKS's own Karpenter must be turned off first),
# the az and kubectl commands that set up the identity, its roles and the bootstrap token Secret, and the
# helm install command. Nothing is changed in Azure or the cluster.
#
# Environment (all optional):
#   AZ                        the Azure CLI to run (default: az)
#   KARPENTER_NAMESPACE       the release namespace (default: karpenter)
#   KARPENTER_SERVICE_ACCOUNT the controller's ServiceAccount (default: karpenter-azure)
#   KARPENTER_IDENTITY        the controller's user-assigned identity in RESOURCE_GROUP (default: karpentermsi,
#                             upstream's name)
#   USE_MANAGED_IDENTITY=true no workload identity: the controller takes tokens of the kubelet identity from
#                             the node's instance metadata service
#   BOOTSTRAP_TOKEN_SECRET    the Secret (key `token`) with the kubelet bootstrap token
#                             (default: karpenter-bootstrap-token)
#   SSH_PUBLIC_KEY_FILE       the nodes' SSH key when the cluster has none (default: ~/.ssh/id_rsa.pub)
#   IMAGE_REPOSITORY, IMAGE_TAG   written as image.repository and image.tag when set
#
# Exit status: 0 the file is written; 1 a look-up failed or the cluster lacks something (one `error:` line
# naming it and the fix, and no file written); 2 wrong arguments.
set -euo pipefail

AZ=${AZ:-az}
NAMESPACE=${KARPENTER_NAMESPACE:-karpenter}
SERVICE_ACCOUNT=${KARPENTER_SERVICE_ACCOUNT:-karpenter-azure}
IDENTITY=${KARPENTER_IDENTITY:-karpentermsi}
MANAGED_IDENTITY=${USE_MANAGED_IDENTITY:-false}
TOKEN_SECRET=${BOOTSTRAP_TOKEN_SECRET:-karpenter-bootstrap-token}
USAGE="usage: hack/configure-values.sh CLUSTER_NAME RESOURCE_GROUP [OUTPUT_FILE]"

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
say() { printf '%s\n' "$*" >&2; }

case $# in
  0) printf 'error: CLUSTER_NAME and RESOURCE_GROUP are missing: %s\n' "$USAGE" >&2; exit 2 ;;
  1) printf 'error: RESOURCE_GROUP is missing: %s\n' "$USAGE" >&2; exit 2 ;;
  2 | 3) ;;
  *) printf 'error: too many arguments (%d): %s\n' "$#" "$USAGE" >&2; exit 2 ;;
esac
CLUSTER=$1
RG=$2
OUT=${3:-karpenter-values.yaml}
[ -n "$CLUSTER" ] || { printf 'error: CLUSTER_NAME is empty: %s\n' "$USAGE" >&2; exit 2; }
[ -n "$RG" ] || { printf 'error: RESOURCE_GROUP is empty: %s\n' "$USAGE" >&2; exit 2; }
case $MANAGED_IDENTITY in
  true | false) ;;
  *) printf 'error: USE_MANAGED_IDENTITY is %s: set it to true or false\n' "$MANAGED_IDENTITY" >&2; exit 2 ;;
esac
OUT_DIR=$(dirname -- "$OUT")
[ -d "$OUT_DIR" ] || die "the directory of OUTPUT_FILE ($OUT_DIR) does not exist: create it or pick another file"

command -v jq >/dev/null || die "jq is not installed: install it (apt-get install jq, or hack/deps.sh)"
command -v "$AZ" >/dev/null ||
  die "the Azure CLI ($AZ) is not installed: install it (https://aka.ms/installazurecli) or set AZ to its path"

# az_json FIX ARGS...: what `az ARGS -o json` prints; when az fails or prints no JSON, one error line with
# the command, az's first error line and FIX.
az_json() {
  local fix=$1 out err status=0
  shift
  err=$(mktemp)
  out=$("$AZ" "$@" -o json 2>"$err") || status=$?
  local reason
  reason=$(grep -m1 -v '^\s*$' "$err" || true)
  rm -f "$err"
  if [ "$status" -ne 0 ]; then
    die "\`az $*\` failed (exit $status${reason:+: $reason}): $fix"
  fi
  jq -e . >/dev/null 2>&1 <<<"$out" || die "\`az $*\` printed no JSON: $fix"
  printf '%s' "$out"
}

# field JSON PATH WHAT FIX: the string at jq PATH of JSON, or one error line naming it (WHAT, PATH) and FIX.
field() {
  local value
  value=$(jq -r "$2 // empty" <<<"$1")
  [ -n "$value" ] || die "az aks show has no $3 ($2): $4"
  printf '%s' "$value"
}
# opt JSON PATH: the string at PATH, empty when null or absent.
opt() { jq -r "$2 // empty" <<<"$1"; }
# A YAML scalar: a JSON string, which YAML reads as the same string.
q() { jq -n --arg v "$1" '$v'; }

SHOW="--name $CLUSTER --resource-group $RG"
say "Reading cluster $CLUSTER in resource group $RG ..."
AKS=$(az_json "check the names, and that \`az login\` and \`az account set --subscription <id>\` point at the cluster's subscription" \
  aks show --name "$CLUSTER" --resource-group "$RG")

ID=$(field "$AKS" .id "resource ID" "pass the output of \`az aks show\` unchanged")
SUBSCRIPTION=$(cut -d/ -f3 <<<"$ID")
[[ $SUBSCRIPTION =~ ^[0-9a-fA-F-]{36}$ ]] ||
  die "az aks show has no subscription in its resource ID (.id is $ID): pass the output of \`az aks show\` unchanged"
LOCATION=$(field "$AKS" .location "location" "pass the output of \`az aks show\` unchanged")
NODE_RG=$(field "$AKS" .nodeResourceGroup "node resource group" "pass the output of \`az aks show\` unchanged")

# The nodes dial the API server by the name its certificate carries: the private FQDN of a private cluster.
if [ "$(jq -r '.apiServerAccessProfile.enablePrivateCluster // false' <<<"$AKS")" = true ]; then
  FQDN=$(field "$AKS" .privateFqdn "private API server name of this private cluster" \
    "wait for \`az aks show $SHOW --query privateFqdn\` to be set, or set settings.clusterEndpoint yourself")
else
  FQDN=$(field "$AKS" .fqdn "API server name" \
    "wait for \`az aks show $SHOW --query fqdn\` to be set, or set settings.clusterEndpoint yourself")
fi
ENDPOINT="https://$FQDN:443"

# Network: upstream's settings take the cluster's values, with "none" meaning unset for mode and policy.
PLUGIN=$(field "$AKS" .networkProfile.networkPlugin "network plugin" "pass the output of \`az aks show\` unchanged")
PLUGIN_MODE=$(opt "$AKS" .networkProfile.networkPluginMode)
POLICY=$(opt "$AKS" .networkProfile.networkPolicy)
DATAPLANE=$(opt "$AKS" .networkProfile.networkDataplane)
case $PLUGIN in
  azure | none) ;;
  kubenet)
    die "networkProfile.networkPlugin is kubenet, which Karpenter (and AKS NAP) does not support: move the cluster to Azure CNI overlay first: az aks update $SHOW --network-plugin azure --network-plugin-mode overlay" ;;
  *) die "networkProfile.networkPlugin is $PLUGIN; this controller supports azure (Azure CNI) and none (bring your own CNI)" ;;
esac
[ "$PLUGIN_MODE" = none ] && PLUGIN_MODE=""
[ "$PLUGIN" = none ] && PLUGIN_MODE=""
case $POLICY in
  "" | none) POLICY="" ;;
  cilium | calico) ;;
  azure)
    die "networkProfile.networkPolicy is azure (Azure Network Policy Manager), which nodes of this controller do not run: move the cluster to Cilium first: az aks update $SHOW --network-dataplane cilium" ;;
  *) die "networkProfile.networkPolicy is $POLICY; this controller supports cilium, calico or none" ;;
esac
case $DATAPLANE in
  "" | azure | cilium) ;;
  *) die "networkProfile.networkDataplane is $DATAPLANE; this controller supports azure or cilium" ;;
esac
DNS_SERVICE_IP=$(opt "$AKS" .networkProfile.dnsServiceIp)

KUBELET_CLIENT_ID=$(field "$AKS" .identityProfile.kubeletidentity.clientId "kubelet identity" \
  "the cluster runs with a service principal; move it to managed identity: az aks update $SHOW --enable-managed-identity")
KUBELET_OBJECT_ID=$(opt "$AKS" .identityProfile.kubeletidentity.objectId)
KUBELET_IDENTITY_ID=$(field "$AKS" .identityProfile.kubeletidentity.resourceId "kubelet identity's resource ID" \
  "the cluster runs with a service principal; move it to managed identity: az aks update $SHOW --enable-managed-identity")

SSH_KEY=$(opt "$AKS" '.linuxProfile.ssh.publicKeys[0].keyData' | head -n1)
if [ -z "$SSH_KEY" ]; then
  KEY_FILE=${SSH_PUBLIC_KEY_FILE:-$HOME/.ssh/id_rsa.pub}
  [ -r "$KEY_FILE" ] ||
    die "az aks show has no SSH public key (.linuxProfile.ssh.publicKeys[0].keyData) and $KEY_FILE cannot be read: set SSH_PUBLIC_KEY_FILE to the nodes' public key file"
  SSH_KEY=$(head -n1 "$KEY_FILE")
fi
SSH_KEY=$(printf '%s' "$SSH_KEY" | tr -d '\r' | sed 's/[[:space:]]*$//')

# The nodes' subnet: the system pool's, in a VNet of the cluster's own; else the VNet AKS made in the
# node resource group (its one subnet, aks-subnet).
SUBNET=$(opt "$AKS" '[.agentPoolProfiles[]? | select(.mode == "System")][0].vnetSubnetId // .agentPoolProfiles[0].vnetSubnetId')
if [ -n "$SUBNET" ]; then
  VNET_ID=${SUBNET%/subnets/*}
  VNET=$(az_json "the identity running az needs Reader on the VNet $VNET_ID" network vnet show --ids "$VNET_ID")
else
  VNETS=$(az_json "the identity running az needs Reader on the node resource group" \
    network vnet list --resource-group "$NODE_RG")
  VNET=$(jq '.[0] // empty' <<<"$VNETS")
  [ -n "$VNET" ] ||
    die "no agent pool has a vnetSubnetId and the node resource group $NODE_RG has no VNet: set settings.vnetSubnetId to the nodes' subnet yourself"
  SUBNET=$(jq -r '([.subnets[]? | select(.name == "aks-subnet")][0] // .subnets[0]).id // empty' <<<"$VNET")
  [ -n "$SUBNET" ] || die "the VNet in $NODE_RG has no subnet: set settings.vnetSubnetId to the nodes' subnet yourself"
  VNET_ID=${SUBNET%/subnets/*}
fi
VNET_GUID=$(opt "$VNET" .resourceGuid)
VNET_RG=$(cut -d/ -f5 <<<"$VNET_ID")

# The identity the controller calls Azure with, and who gets its roles.
OIDC_ON=$(jq -r '.oidcIssuerProfile.enabled // false' <<<"$AKS")
WI_ON=$(jq -r '.securityProfile.workloadIdentity.enabled // false' <<<"$AKS")
ISSUER=$(opt "$AKS" .oidcIssuerProfile.issuerUrl)
NAP=$(opt "$AKS" .nodeProvisioningProfile.mode)

if [ "$NAP" = Auto ]; then
  say ""
  say "warning: Node Auto Provisioning is on for $CLUSTER (nodeProvisioningProfile.mode is Auto): AKS runs its own"
  say "  Karpenter, which acts on the same NodePools and NodeClaims. Turn NAP off before installing this chart:"
  say "    kubectl get nodepools.karpenter.sh,aksnodeclasses.karpenter.azure.com -o yaml > nap-manifests.yaml"
  say "    az aks update $SHOW --node-provisioning-mode Manual"
  say "  AKS refuses while NAP still has nodes; docs/install-aks.md#from-aks-node-auto-provisioning lists the steps."
fi

ROLE_CMD="az role assignment create --assignee-principal-type ServicePrincipal"
NODE_RG_ID="/subscriptions/$SUBSCRIPTION/resourceGroups/$NODE_RG"
# roles ASSIGNEE: the role assignments the controller's identity needs (docs/install-aks.md, step 1).
roles() {
  say "  $ROLE_CMD --assignee-object-id $1 \\"
  say "    --role \"Virtual Machine Contributor\" --scope $NODE_RG_ID"
  say "  $ROLE_CMD --assignee-object-id $1 \\"
  say "    --role \"Network Contributor\" --scope $NODE_RG_ID"
  if [ "${VNET_RG,,}" != "${NODE_RG,,}" ]; then
    say "  $ROLE_CMD --assignee-object-id $1 \\"
    say "    --role \"Network Contributor\" --scope $VNET_ID"
  fi
  say "  $ROLE_CMD --assignee-object-id $1 \\"
  say "    --role \"Managed Identity Operator\" --scope $KUBELET_IDENTITY_ID"
}

CLIENT_ID=""
say ""
if [ "$MANAGED_IDENTITY" = true ]; then
  [ -n "$KUBELET_OBJECT_ID" ] ||
    die "az aks show has no kubelet identity object ID (.identityProfile.kubeletidentity.objectId): pass the output of \`az aks show\` unchanged"
  say "Managed identity: the controller takes tokens of the kubelet identity ($KUBELET_CLIENT_ID) from the"
  say "node's instance metadata service. Any pod on those nodes that reaches it gets the same rights; workload"
  say "identity (USE_MANAGED_IDENTITY unset) keeps them to the controller. Give the kubelet identity its roles:"
  roles "$KUBELET_OBJECT_ID"
else
  say "Workload identity: the controller's identity $IDENTITY, federated with its ServiceAccount and given its"
  say "roles (each command is safe to run again):"
  if [ "$OIDC_ON" != true ] || [ "$WI_ON" != true ] || [ -z "$ISSUER" ]; then
    say "  az aks update $SHOW --enable-oidc-issuer --enable-workload-identity"
    ISSUER="\$(az aks show $SHOW --query oidcIssuerProfile.issuerUrl -o tsv)"
  fi
  say "  az identity create --name $IDENTITY --resource-group $RG --location $LOCATION"
  say "  PRINCIPAL_ID=\$(az identity show --name $IDENTITY --resource-group $RG --query principalId -o tsv)"
  say "  az identity federated-credential create --name karpenter-azure --identity-name $IDENTITY --resource-group $RG \\"
  say "    --issuer \"$ISSUER\" --subject system:serviceaccount:$NAMESPACE:$SERVICE_ACCOUNT --audience api://AzureADTokenExchange"
  # shellcheck disable=SC2016 # printed for the user's shell, which sets PRINCIPAL_ID
  roles '"$PRINCIPAL_ID"'
  say "Without workload identity, run this script with USE_MANAGED_IDENTITY=true to use the kubelet identity instead."
  IDENTITY_JSON=$(az_json "create the identity with the commands above and run again, set KARPENTER_IDENTITY to an existing identity in $RG, or run with USE_MANAGED_IDENTITY=true" \
    identity show --name "$IDENTITY" --resource-group "$RG")
  CLIENT_ID=$(jq -r '.clientId // empty' <<<"$IDENTITY_JSON")
  [ -n "$CLIENT_ID" ] ||
    die "az identity show has no client ID (.clientId) for $IDENTITY: pass the output of \`az identity show\` unchanged"
fi

say ""
say "The bootstrap token nodes join with, copied from the cluster's own bootstrap token Secret:"
say "  kubectl create namespace $NAMESPACE"
say "  BOOTSTRAP=\$(kubectl -n kube-system get secrets --field-selector type=bootstrap.kubernetes.io/token -o jsonpath='{.items[0].metadata.name}')"
say "  kubectl -n $NAMESPACE create secret generic $TOKEN_SECRET --from-literal=token=\"\$(kubectl -n kube-system get secret \"\$BOOTSTRAP\" -o jsonpath='{.data.token-id}' | base64 -d).\$(kubectl -n kube-system get secret \"\$BOOTSTRAP\" -o jsonpath='{.data.token-secret}' | base64 -d)\""

# Written to a file beside OUTPUT_FILE and renamed, so a failure leaves no partial file.
TMP=$(mktemp "$OUT_DIR/.karpenter-values.XXXXXX")
trap 'rm -f "$TMP"' EXIT
{
  printf '# Values for charts/karpenter-azure, written by hack/configure-values.sh from\n'
  # shellcheck disable=SC2016 # backquotes of Markdown, not a command
  printf '# `az aks show %s`.\n' "$SHOW"
  if [ -n "${IMAGE_REPOSITORY:-}" ] || [ -n "${IMAGE_TAG:-}" ]; then
    printf 'image:\n'
    [ -z "${IMAGE_REPOSITORY:-}" ] || printf '  repository: %s\n' "$(q "$IMAGE_REPOSITORY")"
    [ -z "${IMAGE_TAG:-}" ] || printf '  tag: %s\n' "$(q "$IMAGE_TAG")"
  fi
  printf 'settings:\n'
  printf '  clusterName: %s\n' "$(q "$CLUSTER")"
  printf '  clusterEndpoint: %s\n' "$(q "$ENDPOINT")"
  printf '  subscriptionId: %s\n' "$(q "$SUBSCRIPTION")"
  printf '  location: %s\n' "$(q "$LOCATION")"
  printf '  resourceGroup: %s\n' "$(q "$RG")"
  printf '  nodeResourceGroup: %s\n' "$(q "$NODE_RG")"
  printf '  vnetSubnetId: %s\n' "$(q "$SUBNET")"
  [ -z "$VNET_GUID" ] || printf '  vnetGuid: %s\n' "$(q "$VNET_GUID")"
  printf '  networkPlugin: %s\n' "$(q "$PLUGIN")"
  printf '  networkPluginMode: %s\n' "$(q "$PLUGIN_MODE")"
  printf '  networkPolicy: %s\n' "$(q "$POLICY")"
  printf '  networkDataplane: %s\n' "$(q "$DATAPLANE")"
  [ -z "$DNS_SERVICE_IP" ] || printf '  dnsServiceIp: %s\n' "$(q "$DNS_SERVICE_IP")"
  printf '  kubeletIdentityClientId: %s\n' "$(q "$KUBELET_CLIENT_ID")"
  printf '  nodeIdentities:\n    - %s\n' "$(q "$KUBELET_IDENTITY_ID")"
  printf '  sshPublicKey: %s\n' "$(q "$SSH_KEY")"
  printf '  # The Secret the kubectl commands printed by hack/configure-values.sh create.\n'
  printf '  kubeletBootstrapTokenSecret:\n    name: %s\n    key: token\n' "$(q "$TOKEN_SECRET")"
  if [ "$MANAGED_IDENTITY" = true ]; then
    printf '  # Managed identity: the kubelet identity, from the node'"'"'s instance metadata service.\n'
    printf '  clientId: %s\n' "$(q "$KUBELET_CLIENT_ID")"
    printf '# No workload identity webhook mutation: the controller must not see a federated token file.\n'
    printf 'podLabels:\n  azure.workload.identity/use: "false"\n'
    printf 'serviceAccount:\n  name: %s\n' "$(q "$SERVICE_ACCOUNT")"
  else
    printf 'serviceAccount:\n  name: %s\n' "$(q "$SERVICE_ACCOUNT")"
    printf '  annotations:\n    azure.workload.identity/client-id: %s\n' "$(q "$CLIENT_ID")"
  fi
} >"$TMP"
chmod 0644 "$TMP"
mv -f -- "$TMP" "$OUT"
trap - EXIT

say ""
say "Wrote $OUT. Install with:"
say "  helm install karpenter-azure charts/karpenter-azure --namespace $NAMESPACE --values $OUT \\"
say "    --set image.repository=<registry>/karpenter-azure --set image.tag=<tag>"
