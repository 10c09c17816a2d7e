{{/* The chart's name. */}}
{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: object names of namespaced objects and of the ClusterRole(Binding). */}}
{{- define "phalanx.fullname" -}}
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

{{- define "phalanx.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "phalanx.labels" -}}
helm.sh/chart: {{ include "phalanx.chart" . }}
{{ include "phalanx.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: phalanx
{{- end }}

{{- define "phalanx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "phalanx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service in front of the webhook; the serving certificate is for <this>.<namespace>.svc. */}}
{{- define "phalanx.serviceName" -}}
{{- include "phalanx.fullname" . }}
{{- end }}

{{- define "phalanx.tlsSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "phalanx.fullname" .)) .Values.webhook.tls.secretName }}
{{- end }}

{{- define "phalanx.certificateName" -}}
{{- printf "%s-webhook" (include "phalanx.fullname" .) }}
{{- end }}

{{- define "phalanx.issuerName" -}}
{{- printf "%s-selfsigned" (include "phalanx.fullname" .) }}
{{- end }}


{{/* Never kube-system or Phalanx's own namespace; only the operator's namespaces when it has a list. */}}
{{- define "phalanx.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq) }}
        - {{ . | quote }}
        {{- end }}
    {{- with .Values.operator.namespaces }}
    - key: kubernetes.io/metadata.name
      operator: In
      values:
        {{- range . }}
        - {{ . | quote }}
        {{- end }}
    {{- end }}
{{- end }}

{{/* The clientConfig of the webhook served at `path` (Kopf serves each handler at /<handler id>). */}}
{{- define "phalanx.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "phalanx.serviceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    port: {{ .root.Values.service.webhookPort }}
    path: {{ .path }}
{{- end }}
