{{/*
Names, labels and small pieces shared by the templates.
*/}}

{{/* The chart name, or nameOverride; 63 characters is the limit of a label value. */}}
{{- define "karpenter-azure.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: fullnameOverride, else the release name when it already contains the
chart name (release "karpenter-azure" gives "karpenter-azure", not "karpenter-azure-karpenter-azure").
*/}}
{{- define "karpenter-azure.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "karpenter-azure.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels that select the controller's pods; never change them, Deployment selectors are immutable. */}}
{{- define "karpenter-azure.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter-azure.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "karpenter-azure.labels" -}}
helm.sh/chart: {{ include "karpenter-azure.chart" . }}
{{ include "karpenter-azure.selectorLabels" . }}
app.kubernetes.io/version: {{ include "karpenter-azure.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
metadata.annotations of every object, when additionalAnnotations has any; callers write
`{{- with include "karpenter-azure.annotations" . }}{{ . | nindent 2 }}{{- end }}` so that nothing, not even
a blank line, is left when there are none.
*/}}
{{- define "karpenter-azure.annotations" -}}
{{- with .Values.additionalAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "karpenter-azure.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter-azure.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false: name the existing ServiceAccount the controller runs as" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The controller image: each of repository, tag and digest from controller.image (upstream's place) when
given there, else from image; the tag defaults to the chart's appVersion.
*/}}
{{- define "karpenter-azure.image" -}}
{{- $image := .Values.controller.image | default dict }}
{{- $repository := required "image.repository (or controller.image.repository) is required: no image is published yet; build the repository's Dockerfile and push it to a registry the cluster can pull from" ($image.repository | default .Values.image.repository) }}
{{- printf "%s:%s" $repository (include "karpenter-azure.imageTag" .) }}
{{- with $image.digest | default .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{- define "karpenter-azure.imageTag" -}}
{{- (.Values.controller.image | default dict).tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The leader election Lease: the Role grants get/update on this name only, and the controller is told
the same name (LEADER_ELECTION_NAME), so the two cannot disagree.
*/}}
{{- define "karpenter-azure.leaseName" -}}
karpenter-leader-election
{{- end }}

{{/* The Secret the chart creates for settings.kubeletBootstrapToken. */}}
{{- define "karpenter-azure.bootstrapTokenSecretName" -}}
{{- printf "%s-bootstrap-token" (include "karpenter-azure.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The value controller.env gives variable .name, or "". */}}
{{- define "karpenter-azure.envValue" -}}
{{- range .root.Values.controller.env }}
{{- if eq .name $.name }}{{ .value | default "" }}{{ end }}
{{- end }}
{{- end }}

{{/*
Upstream chart values (Azure/karpenter-provider-azure charts/karpenter/values.yaml) this chart accepts
but that change nothing here, one "  - key: reason" line for each that is set. values.yaml does not
define them, so any of them present came from the user.
*/}}
{{- define "karpenter-azure.noEffect" -}}
{{- $v := .Values }}
{{- if hasKey $v "webhook" }}
  - webhook: there are no admission webhooks: the CRDs validate with CEL rules
{{- end }}
{{- if hasKey $v "logOutputPaths" }}
  - logOutputPaths: the controller logs to the container's stdout
{{- end }}
{{- if hasKey $v "logErrorOutputPaths" }}
  - logErrorOutputPaths: the controller logs errors to the container's stdout
{{- end }}
{{- if hasKey $v.settings "ignoreDRARequests" }}
  - settings.ignoreDRARequests: the solver does not read Dynamic Resource Allocation claims
{{- end }}
{{- if hasKey $v.settings "disableClusterStateObservability" }}
  - settings.disableClusterStateObservability: the cluster state metrics are always exported
{{- end }}
{{- range $gate := list "reservedCapacity" "capacityBuffer" }}
{{- if get ($v.settings.featureGates | default dict) $gate }}
  - settings.featureGates.{{ $gate }}: not implemented by this controller
{{- end }}
{{- end }}
{{- end }}
