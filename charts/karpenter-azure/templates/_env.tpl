{{/*
The controller's environment: every value under `settings` (and logLevel and the ports) as the
variable the controller reads (src/operator/options.rs, upstream's names), then controller.env.

Upstream's chart (charts/karpenter/templates/deployment.yaml) appends controller.env after its own
variables, and its self-hosted install (karpenter-values-template.yaml) passes most settings that way;
Kubernetes lets the last of two equal names win. So a name in controller.env replaces the variable the
chart would derive from `settings` (never two entries of one name), and a required setting given there
is not required under `settings`. With controller.envFrom the chart cannot see the values, so nothing is
required at render time: the controller names a missing setting when it starts.

Optional settings left empty are not set at all, so the controller's own default applies. Secrets are
only ever referenced.
*/}}
{{- define "karpenter-azure.env" -}}
{{- $given := dict }}
{{- range .Values.controller.env }}
{{- $_ := set $given .name (.value | default "") }}
{{- end }}
{{- $open := not (empty .Values.controller.envFrom) }}
{{- $derived := include "karpenter-azure.settingsEnv" (dict "root" . "given" $given "open" $open) | fromYamlArray }}
{{- $env := list }}
{{- range $derived }}
{{- if not (hasKey $given .name) }}
{{- $env = append $env . }}
{{- end }}
{{- end }}
{{- range .Values.controller.env }}
{{- $env = append $env . }}
{{- end }}
{{- /* Written out by hand rather than with toYaml, which would fold long values over lines. */}}
{{- range $env }}
- name: {{ .name }}
{{- if hasKey . "value" }}
  value: {{ .value | default "" | quote }}
{{- end }}
{{- with .valueFrom }}
  valueFrom:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A required setting: its variable when the value is given; nothing when controller.env names the variable
or controller.envFrom may hold it; else the install fails naming the value and the variable.
*/}}
{{- define "karpenter-azure.requiredSetting" -}}
{{- if .value }}
- name: {{ .env }}
  value: {{ .value | quote }}
{{- else if not (or (hasKey .given .env) .open) }}
{{- fail (printf "settings.%s is required (%s): %s; or give %s in controller.env" .key .env .what .env) }}
{{- end }}
{{- end }}

{{/* The variables derived from `settings`; see karpenter-azure.env. */}}
{{- define "karpenter-azure.settingsEnv" -}}
{{- $root := .root }}
{{- $given := .given }}
{{- $open := .open }}
{{- $s := $root.Values.settings }}
{{- $plugin := $s.networkPlugin }}
{{- $mode := $s.networkPluginMode }}
{{- if or (hasKey $given "NETWORK_PLUGIN") (hasKey $given "NETWORK_PLUGIN_MODE") }}
{{- $plugin = get $given "NETWORK_PLUGIN" | default $plugin }}
{{- $mode = ternary (get $given "NETWORK_PLUGIN_MODE") $mode (hasKey $given "NETWORK_PLUGIN_MODE") }}
{{- if and (eq $plugin "none") (eq $mode "overlay") }}
{{- fail "NETWORK_PLUGIN_MODE (settings.networkPluginMode) must be \"\" when NETWORK_PLUGIN is none (bring-your-own CNI has no Azure overlay)" }}
{{- end }}
{{- else if and (eq $plugin "none") (eq $mode "overlay") }}
{{- fail "settings.networkPluginMode must be \"\" when settings.networkPlugin is none (bring-your-own CNI has no Azure overlay)" }}
{{- end }}
{{- if eq (int $root.Values.controller.metrics.port) (int $root.Values.controller.healthProbe.port) }}
{{- fail "controller.metrics.port and controller.healthProbe.port must differ" }}
{{- end }}
{{- if and $s.clusterCABundle $s.clusterCaBundle (ne $s.clusterCABundle $s.clusterCaBundle) }}
{{- fail "settings.clusterCABundle and settings.clusterCaBundle are the same value (CLUSTER_CA_BUNDLE) under two spellings: set one of them" }}
{{- end }}
{{- $required := dict "given" $given "open" $open }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "clusterName" "env" "CLUSTER_NAME" "value" $s.clusterName "what" "the AKS cluster's name") $required) }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "clusterEndpoint" "env" "CLUSTER_ENDPOINT" "value" $s.clusterEndpoint "what" "the API server URL nodes join, https://...") $required) }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "subscriptionId" "env" "AZURE_SUBSCRIPTION_ID" "value" $s.subscriptionId "what" "the subscription nodes are created in") $required) }}
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
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "location" "env" "LOCATION" "value" $s.location "what" "the cluster's region, such as eastus") $required) }}
{{- with $s.resourceGroup }}
- name: ARM_RESOURCE_GROUP
  value: {{ . | quote }}
{{- end }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "nodeResourceGroup" "env" "AZURE_NODE_RESOURCE_GROUP" "value" $s.nodeResourceGroup "what" "the resource group of the node VMs (MC_...)") $required) }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "vnetSubnetId" "env" "VNET_SUBNET_ID" "value" $s.vnetSubnetId "what" "the ARM ID of the nodes' subnet") $required) }}
{{- if or $s.kubeletBootstrapTokenSecret.name $s.kubeletBootstrapToken (not (or (hasKey $given "KUBELET_BOOTSTRAP_TOKEN") $open)) }}
- name: KUBELET_BOOTSTRAP_TOKEN
  valueFrom:
    secretKeyRef:
      {{- include "karpenter-azure.bootstrapTokenRef" $root | trim | nindent 6 }}
{{- end }}
{{- include "karpenter-azure.requiredSetting" (merge (dict "key" "sshPublicKey" "env" "SSH_PUBLIC_KEY" "value" ($s.sshPublicKey | trim) "what" "the nodes' admin SSH public key") $required) }}
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
{{- with $s.clusterCABundle | default $s.clusterCaBundle }}
- name: CLUSTER_CA_BUNDLE
  value: {{ . | quote }}
{{- end }}
{{- with $s.nodeOsDiskEncryptionSetId }}
- name: NODE_OSDISK_DISKENCRYPTIONSET_ID
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
{{- with $s.minValuesPolicy }}
- name: MIN_VALUES_POLICY
  value: {{ . | quote }}
{{- end }}
{{- with $s.preferencePolicy }}
- name: PREFERENCE_POLICY
  value: {{ . | quote }}
{{- end }}
{{- with $s.featureGates }}
- name: FEATURE_GATES
  value: {{ include "karpenter-azure.featureGates" . | quote }}
{{- end }}
- name: LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
- name: LOG_FORMAT
  value: {{ $root.Values.logFormat | default "json" | quote }}
- name: METRICS_PORT
  value: {{ $root.Values.controller.metrics.port | quote }}
- name: HEALTH_PROBE_PORT
  value: {{ $root.Values.controller.healthProbe.port | quote }}
- name: LEADER_ELECTION_NAME
  value: {{ include "karpenter-azure.leaseName" $root | quote }}
{{- /* The Role for the Lease exists in the release namespace only. */}}
- name: LEADER_ELECTION_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: SYSTEM_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
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
{{- $pairs = append $pairs (printf "%s=%s" $key (toString $value)) }}
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
