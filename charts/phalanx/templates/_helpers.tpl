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

{{/* The pods of the webhook Deployment (webhook.deployment.enabled): a name of their own, so neither
Deployment's selector, Service, PodDisruptionBudget nor anti-affinity takes the other's pods. */}}
{{- define "phalanx.webhooksSelectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}-webhooks
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "phalanx.webhooksName" -}}
{{- printf "%s-webhooks" (include "phalanx.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* The pods behind the Service the webhook configurations call. */}}
{{- define "phalanx.webhookPodLabels" -}}
{{- if .Values.webhook.deployment.enabled }}
{{- include "phalanx.webhooksSelectorLabels" . }}
{{- else }}
{{- include "phalanx.selectorLabels" . }}
{{- end }}
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

{{/* What the schema cannot say: rules between values. Included by deployment.yaml, so any render fails. */}}
{{- define "phalanx.validate" -}}
{{- $le := .Values.leaderElection }}
{{- if and (gt (int .Values.replicaCount) 1) (not $le.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: every replica would run its own scheduling loop and they would admit gangs onto the same free nodes. Set leaderElection.enabled=true, or replicaCount=1." (int .Values.replicaCount)) }}
{{- end }}
{{- if $le.enabled }}
{{- if le (float64 $le.leaseDurationSeconds) (float64 $le.renewDeadlineSeconds) }}
{{- fail (printf "leaderElection.leaseDurationSeconds (%v) must be greater than leaderElection.renewDeadlineSeconds (%v)" $le.leaseDurationSeconds $le.renewDeadlineSeconds) }}
{{- end }}
{{- if le (float64 $le.renewDeadlineSeconds) (float64 $le.retryPeriodSeconds) }}
{{- fail (printf "leaderElection.renewDeadlineSeconds (%v) must be greater than leaderElection.retryPeriodSeconds (%v)" $le.renewDeadlineSeconds $le.retryPeriodSeconds) }}
{{- end }}
{{- end }}
{{- if and .Values.rbac.explain.subjects (not .Values.rbac.explain.create) }}
{{- fail "rbac.explain.subjects is set but rbac.explain.create is false: there is no ClusterRole to bind them to" }}
{{- end }}
{{- end }}
