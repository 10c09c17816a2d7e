{{/*
One Deployment of `phalanx run`, for a role (docs/design.md, What runs where):
- all: the scheduling loop (leader-elected) and the webhook server in every replica (the default);
- controller: the loop and its watches, no webhook server (webhook.deployment.enabled);
- webhooks: the webhook server and a cache of what the reviews read, no loop, no Lease (its own Deployment,
  `<fullname>-webhooks`, when webhook.deployment.enabled).
Arguments: root (the chart's context), role.
*/}}
{{- define "phalanx.deployment" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $role := .role }}
{{- $webhooks := ne $role "controller" }}
{{- $loop := ne $role "webhooks" }}
{{- $certDir := "/var/run/phalanx/webhook-tls" }}
{{- $name := include "phalanx.fullname" $root }}
{{- $replicas := $v.replicaCount }}
{{- $resources := $v.resources }}
{{- if eq $role "webhooks" }}
{{- $name = include "phalanx.webhooksName" $root }}
{{- $replicas = $v.webhook.deployment.replicaCount }}
{{- $resources = $v.webhook.deployment.resources | default $v.resources }}
{{- end }}
{{- $selector := include "phalanx.selectorLabels" $root }}
{{- if eq $role "webhooks" }}
{{- $selector = include "phalanx.webhooksSelectorLabels" $root }}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "phalanx.labels" $root | nindent 4 }}
    {{- if ne $role "all" }}
    app.kubernetes.io/component: {{ $role }}
    {{- end }}
spec:
  replicas: {{ $replicas }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $selector | nindent 8 }}
        {{- if ne $role "all" }}
        app.kubernetes.io/component: {{ $role }}
        {{- end }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $v.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "phalanx.serviceAccountName" $root }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      containers:
        - name: phalanx
          image: "{{ $v.image.repository }}:{{ $v.image.tag | default $root.Chart.AppVersion }}"
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command: {{ toJson $v.command }}
          args:
            - run
            {{- if ne $role "all" }}
            - --role={{ $role }}
            {{- end }}
            # The webhook configurations come with the chart (Kopf does not write them) and call the Service.
            - --webhook-config=external
            - --webhook-config-name={{ $v.webhook.configurationName }}
            {{- if $webhooks }}
            - --webhook-host=0.0.0.0
            - --webhook-port={{ $v.webhook.port }}
            - --webhook-service={{ include "phalanx.serviceName" $root }}
            - --webhook-cert-dir={{ $certDir }}
            {{- if not $v.certManager.enabled }}
            # Phalanx makes and renews the certificate in this Secret and puts its CA into the configurations.
            - --webhook-secret={{ include "phalanx.tlsSecretName" $root }}
            {{- end }}
            {{- end }}
            - --metrics-host=0.0.0.0
            - --metrics-port={{ $v.metrics.port }}
            # The CRDs come with the chart (crds/).
            - --no-install-crds
            - --log-format={{ $v.operator.logFormat }}
            - --resync-seconds={{ $v.operator.resyncSeconds }}
            {{- if $v.operator.verbose }}
            - --verbose
            {{- end }}
            {{- with $v.operator.namespaces }}
            - --namespaces={{ join "," . }}
            {{- end }}
            {{- if and $loop $v.leaderElection.enabled }}
            - --leader-election
            - --lease-name={{ $v.leaderElection.leaseName }}
            - --lease-duration-seconds={{ $v.leaderElection.leaseDurationSeconds }}
            - --renew-deadline-seconds={{ $v.leaderElection.renewDeadlineSeconds }}
            - --retry-period-seconds={{ $v.leaderElection.retryPeriodSeconds }}
            {{- else }}
            # {{ if $loop }}One replica runs the loop{{ else }}No scheduling loop here: nothing to elect{{ end }}.
            - --no-leader-election
            {{- end }}
            {{- with $v.operator.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            # The Lease's and the webhook Secret's namespace.
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            # This replica in the Lease and in its Events.
            - name: PHALANX_IDENTITY
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: PYTHONDONTWRITEBYTECODE
              value: "1"
            - name: PYTHONUNBUFFERED
              value: "1"
            {{- with $v.operator.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- if $webhooks }}
            - name: webhook
              containerPort: {{ $v.webhook.port }}
              protocol: TCP
            {{- end }}
            - name: metrics
              containerPort: {{ $v.metrics.port }}
              protocol: TCP
          {{- with $v.startupProbe }}
          startupProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.readinessProbe }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            {{- if $webhooks }}
            - name: webhook-tls
              mountPath: {{ $certDir }}
              readOnly: {{ $v.certManager.enabled }}
            {{- end }}
            - name: tmp
              mountPath: /tmp
      volumes:
        {{- if not $webhooks }}
        {{- else if $v.certManager.enabled }}
        # cert-manager's Secret; the kubelet refreshes the files, Kopf's server reloads them.
        - name: webhook-tls
          secret:
            secretName: {{ include "phalanx.tlsSecretName" $root }}
            defaultMode: 0440
        {{- else }}
        # Phalanx writes the Secret's certificate here (in memory: the key never touches the node's disk).
        - name: webhook-tls
          emptyDir:
            medium: Memory
            sizeLimit: 1Mi
        {{- end }}
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      affinity:
        {{- if $v.affinity }}
        {{- toYaml $v.affinity | nindent 8 }}
        {{- else }}
        # Replicas on different nodes when there are several (preferred, so one node still runs them all).
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- $selector | nindent 20 }}
        {{- end }}
{{- end }}
