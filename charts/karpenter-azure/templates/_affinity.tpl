{{/*
Placement terms that should count the controller's own pods: a values file cannot know the release's
labels, so a term without labelSelector gets the pod's selector labels, as upstream's chart does.
*/}}

{{/* A list of terms (topology spread constraints, pod affinity terms) with labelSelector filled in. */}}
{{- define "karpenter-azure.withSelector" -}}
{{- $out := list }}
{{- range .terms }}
{{- $term := deepCopy . }}
{{- if not $term.labelSelector }}
{{- $_ := set $term "labelSelector" (dict "matchLabels" $.selector) }}
{{- end }}
{{- $out = append $out $term }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The affinity value, with labelSelector filled in for its pod (anti-)affinity terms. */}}
{{- define "karpenter-azure.affinity" -}}
{{- $affinity := deepCopy .affinity }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with get $affinity $kind }}
{{- $rules := deepCopy . }}
{{- with .requiredDuringSchedulingIgnoredDuringExecution }}
{{- $_ := set $rules "requiredDuringSchedulingIgnoredDuringExecution" (include "karpenter-azure.withSelector" (dict "terms" . "selector" $.selector) | fromYamlArray) }}
{{- end }}
{{- with .preferredDuringSchedulingIgnoredDuringExecution }}
{{- $weighted := list }}
{{- range . }}
{{- $one := deepCopy . }}
{{- $term := include "karpenter-azure.withSelector" (dict "terms" (list .podAffinityTerm) "selector" $.selector) | fromYamlArray | first }}
{{- $_ := set $one "podAffinityTerm" $term }}
{{- $weighted = append $weighted $one }}
{{- end }}
{{- $_ := set $rules "preferredDuringSchedulingIgnoredDuringExecution" $weighted }}
{{- end }}
{{- $_ := set $affinity $kind $rules }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}
