{{/*
The controller's environment: every value under `settings` (and logLevel and the ports) as the
variable the controller reads (src/operator/options.rs, upstream's names). Optional settings left
empty are not set at all, so the controller's own default applies. Secrets are only ever referenced.
*/}}
{{- define "karpenter-azure.env" -}}
{{- $s := .Values.settings }}
{{- if and (eq $s.networkPlugin "none") (eq $s.networkPluginMode "overlay") }}
{{- fail "settings.networkPluginMode must be \"\" when settings.networkPlugin is none (bring-your-own CNI has no Azure overlay)" }}
{{- end }}
{{- if eq (int .Values.controller.metrics.port) (int .Values.controller.healthProbe.port) }}
{{- fail "controller.metrics.port and controller.healthProbe.port must differ" }}
{{- end }}
- name: CLUSTER_NAME
  value: {{ required "settings.clusterName is required (CLUSTER_NAME): the AKS cluster's name" $s.clusterName | quote }}
- name: CLUSTER_ENDPOINT
  value: {{ required "settings.clusterEndpoint is required (CLUSTER_ENDPOINT): the API server URL nodes join, https://..." $s.clusterEndpoint | quote }}
- name: AZURE_SUBSCRIPTION_ID
  value: {{ required "settings.subscriptionId is required (AZURE_SUBSCRIPTION_ID): the subscription nodes are created in" $s.subscriptionId | quote }}
{{- with $s.tenantId }}
- name: AZURE_TENANT_ID
  value: {{ . | quote }}
{{- end }}
{{- with $s.clientId }}
- name: AZURE_CLIENT_ID
  value: {{ . | quote }}
{{- end }}
{{- with $s.clientSecretRef.name }}
- name: AZURE_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ required "settings.clientSecretRef.key is required with settings.clientSecretRef.name" $s.clientSecretRef.key | quote }}
{{- end }}
- name: LOCATION
  value: {{ required "settings.location is required (LOCATION): the cluster's region, such as eastus" $s.location | quote }}
{{- with $s.resourceGroup }}
- name: ARM_RESOURCE_GROUP
  value: {{ . | quote }}
{{- end }}
- name: AZURE_NODE_RESOURCE_GROUP
  value: {{ required "settings.nodeResourceGroup is required (AZURE_NODE_RESOURCE_GROUP): the resource group of the node VMs (MC_...)" $s.nodeResourceGroup | quote }}
- name: VNET_SUBNET_ID
  value: {{ required "settings.vnetSubnetId is required (VNET_SUBNET_ID): the ARM ID of the nodes' subnet" $s.vnetSubnetId | quote }}
- name: KUBELET_BOOTSTRAP_TOKEN
  valueFrom:
    secretKeyRef:
      {{- include "karpenter-azure.bootstrapTokenRef" . | trim | nindent 6 }}
- name: SSH_PUBLIC_KEY
  value: {{ required "settings.sshPublicKey is required (SSH_PUBLIC_KEY): the nodes' admin SSH public key" $s.sshPublicKey | trim | quote }}
- name: LINUX_ADMIN_USERNAME
  value: {{ $s.linuxAdminUsername | quote }}
- name: NETWORK_PLUGIN
  value: {{ $s.networkPlugin | quote }}
- name: NETWORK_PLUGIN_MODE
  value: {{ $s.networkPluginMode | quote }}
- name: NETWORK_POLICY
  value: {{ $s.networkPolicy | quote }}
- name: NETWORK_DATAPLANE
  value: {{ $s.networkDataplane | quote }}
{{- with $s.nodeIdentities }}
- name: NODE_IDENTITIES
  value: {{ join "," . | quote }}
{{- end }}
{{- with $s.kubeletIdentityClientId }}
- name: KUBELET_IDENTITY_CLIENT_ID
  value: {{ . | quote }}
{{- end }}
{{- with $s.clusterCaBundle }}
- name: CLUSTER_CA_BUNDLE
  value: {{ . | quote }}
{{- end }}
{{- with $s.dnsServiceIp }}
- name: DNS_SERVICE_IP
  value: {{ . | quote }}
{{- end }}
{{- with $s.vnetGuid }}
- name: VNET_GUID
  value: {{ . | quote }}
{{- end }}
- name: VM_MEMORY_OVERHEAD_PERCENT
  value: {{ $s.vmMemoryOverheadPercent | toString | quote }}
{{- with $s.tags }}
- name: ADDITIONAL_TAGS
  {{- /* Helm ranges over a map in key order, so the value is stable and the pods do not roll. */}}
  value: {{ include "karpenter-azure.tags" . | quote }}
{{- end }}
- name: BATCH_IDLE_DURATION
  value: {{ $s.batchIdleDuration | quote }}
- name: BATCH_MAX_DURATION
  value: {{ $s.batchMaxDuration | quote }}
{{- with $s.armEndpoint }}
- name: ARM_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $s.authorityHost }}
- name: AZURE_AUTHORITY_HOST
  value: {{ . | quote }}
{{- end }}
{{- with $s.retailPricesUrl }}
- name: RETAIL_PRICES_URL
  value: {{ . | quote }}
{{- end }}
{{- with $s.featureGates }}
- name: FEATURE_GATES
  value: {{ include "karpenter-azure.featureGates" . | quote }}
{{- end }}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: METRICS_PORT
  value: {{ .Values.controller.metrics.port | quote }}
- name: HEALTH_PROBE_PORT
  value: {{ .Values.controller.healthProbe.port | quote }}
- name: LEADER_ELECTION_NAME
  value: {{ include "karpenter-azure.leaseName" . | quote }}
{{- /* The Role for the Lease exists in the release namespace only. */}}
- name: LEADER_ELECTION_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: SYSTEM_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with .Values.controller.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
settings.featureGates as upstream's FEATURE_GATES, Gate=bool,Gate=bool: the chart's camelCase names with
the first letter raised (nodeRepair -> NodeRepair), in key order so the pods do not roll.
*/}}
{{- define "karpenter-azure.featureGates" -}}
{{- $pairs := list }}
{{- range $gate, $enabled := . }}
{{- $pairs = append $pairs (printf "%s%s=%t" (upper (substr 0 1 $gate)) (substr 1 -1 $gate) $enabled) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* settings.tags as k=v,k=v (ADDITIONAL_TAGS). */}}
{{- define "karpenter-azure.tags" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
The secretKeyRef of KUBELET_BOOTSTRAP_TOKEN: an existing Secret (kubeletBootstrapTokenSecret), or the
one the chart makes from kubeletBootstrapToken. Never both, so which one is used is never a guess.
*/}}
{{- define "karpenter-azure.bootstrapTokenRef" -}}
{{- $s := .Values.settings }}
{{- if and $s.kubeletBootstrapTokenSecret.name $s.kubeletBootstrapToken }}
{{- fail "set settings.kubeletBootstrapTokenSecret or settings.kubeletBootstrapToken, not both" }}
{{- else if $s.kubeletBootstrapTokenSecret.name }}
name: {{ $s.kubeletBootstrapTokenSecret.name | quote }}
key: {{ required "settings.kubeletBootstrapTokenSecret.key is required with settings.kubeletBootstrapTokenSecret.name" $s.kubeletBootstrapTokenSecret.key | quote }}
{{- else if $s.kubeletBootstrapToken }}
name: {{ include "karpenter-azure.bootstrapTokenSecretName" . | quote }}
key: token
{{- else }}
{{- fail "settings.kubeletBootstrapTokenSecret {name, key} or settings.kubeletBootstrapToken is required (KUBELET_BOOTSTRAP_TOKEN): the TLS bootstrap token nodes join with" }}
{{- end }}
{{- end }}
