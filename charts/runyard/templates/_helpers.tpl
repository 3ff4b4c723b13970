{{/* Names ------------------------------------------------------------------------- */}}

{{- define "runyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "runyard.fullname" -}}
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

{{/* A component's object name: <fullname>-api, <fullname>-worker, ... */}}
{{- define "runyard.componentName" -}}
{{- printf "%s-%s" (include "runyard.fullname" .ctx | trunc 50 | trimSuffix "-") .component }}
{{- end }}

{{- define "runyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runyard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "runyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "runyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{- define "runyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "runyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "runyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "runyard.secretName" -}}
{{- default (include "runyard.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* The namespaces whose TrainingJobs the controller takes, each with its project, as
JSON: those given, else the release's own for the project default. */}}
{{- define "runyard.controllerNamespaces" -}}
{{- toJson (default (dict .Release.Namespace "default") .Values.controller.namespaces) }}
{{- end }}

{{/* Where job pods run. */}}
{{- define "runyard.jobsNamespace" -}}
{{- default .Release.Namespace .Values.kubernetes.namespace }}
{{- end }}

{{/* Settings ---------------------------------------------------------------------- */}}

{{/* The artifact root's path when it is file:// and a shared claim is mounted there. */}}
{{- define "runyard.artifactPath" -}}
{{- if and .Values.artifacts.persistence.enabled (hasPrefix "file:///" .Values.artifacts.root) }}
{{- trimPrefix "file://" .Values.artifacts.root | trimSuffix "/" }}
{{- end }}
{{- end }}

{{- define "runyard.artifactClaim" -}}
{{- if include "runyard.artifactPath" . }}
{{- default (printf "%s-artifacts" (include "runyard.fullname" .)) .Values.artifacts.persistence.existingClaim }}
{{- end }}
{{- end }}

{{- define "runyard.publicUrl" -}}
{{- if .Values.publicUrl }}
{{- .Values.publicUrl }}
{{- else }}
{{- printf "http://%s.%s.svc.%s:%d" (include "runyard.componentName" (dict "ctx" . "component" "api")) .Release.Namespace .Values.clusterDomain (int .Values.api.service.port) }}
{{- end }}
{{- end }}

{{/* RUNYARD_KUBERNETES: the backend's settings, keys exactly as KubernetesSettings names them. */}}
{{- define "runyard.kubernetesSettings" -}}
{{- $k := .Values.kubernetes }}
{{- $s := dict
  "namespace" (include "runyard.jobsNamespace" .)
  "cluster_domain" .Values.clusterDomain
  "image" (default (printf "runyard/runtime:%s" .Chart.AppVersion) $k.image)
  "images_repository" $k.images_repository
  "image_pull_policy" $k.image_pull_policy
  "image_pull_secrets" $k.image_pull_secrets
  "node_selector" $k.node_selector
  "tolerations" $k.tolerations
  "schedule_timeout_seconds" $k.schedule_timeout_seconds
  "on_unschedulable" $k.on_unschedulable
  "gang_scheduler" $k.gang_scheduler
  "agent_port" (int $k.agent_port) }}
{{- range $key := list "priority_class" "gang_queue" }}
{{- with index $k $key }}
{{- $_ := set $s $key . }}
{{- end }}
{{- end }}
{{- with include "runyard.artifactClaim" . }}
{{- $_ := set $s "artifact_volume_claim" . }}
{{- end }}
{{- with include "runyard.jobS3Secret" . }}
{{- $_ := set $s "s3_secret" . }}
{{- end }}
{{- with include "runyard.jobServiceAccountName" . }}
{{- $_ := set $s "service_account" . }}
{{- end }}
{{- toJson $s }}
{{- end }}

{{/* RUNYARD_BACKENDS: backends, and the instanceTypes it does not name on Kubernetes. */}}
{{- define "runyard.backends" -}}
{{- $backends := deepCopy .Values.backends }}
{{- range .Values.instanceTypes }}
{{- if not (hasKey $backends .name) }}
{{- $_ := set $backends .name "kubernetes" }}
{{- end }}
{{- end }}
{{- toJson $backends }}
{{- end }}

{{/* The non-secret settings, shared by the ConfigMap and the migration hook's copy. */}}
{{- define "runyard.configData" -}}
{{- if and (include "runyard.artifactPath" .) (ne (include "runyard.jobsNamespace" .) .Release.Namespace) (not .Values.artifacts.persistence.existingClaim) }}
{{- fail (printf "artifacts.persistence: a PersistentVolumeClaim belongs to one namespace, and job pods run in %q; set artifacts.persistence.existingClaim to a claim that exists in both namespaces on the same ReadWriteMany volume, or leave kubernetes.namespace empty" (include "runyard.jobsNamespace" .)) }}
{{- end -}}
RUNYARD_ENVIRONMENT: production
RUNYARD_HOME: /var/lib/runyard
RUNYARD_ARTIFACT_ROOT: {{ include "runyard.artifactRoot" . | quote }}
RUNYARD_PUBLIC_URL: {{ include "runyard.publicUrl" . | quote }}
RUNYARD_ROOT_PATH: {{ .Values.rootPath | quote }}
RUNYARD_BACKENDS: {{ include "runyard.backends" . | quote }}
{{- with .Values.instanceTypes }}
RUNYARD_INSTANCE_TYPES: {{ . | toJson | quote }}
{{- end }}
RUNYARD_KUBERNETES: {{ include "runyard.kubernetesSettings" . | quote }}
RUNYARD_LOG_FORMAT: {{ .Values.logFormat | quote }}
{{- if .Values.metrics.worker.enabled }}
RUNYARD_WORKER_METRICS_PORT: {{ int .Values.metrics.worker.port | quote }}
{{- end }}
{{- include "runyard.s3Endpoint" . }}
{{- if include "runyard.minio.enabled" . }}
AWS_ENDPOINT_URL_STS: {{ include "runyard.minio.url" . | quote }}
{{- if not (hasKey .Values.extraConfig "RUNYARD_INSTANCE_ROLE_ARN") }}
RUNYARD_INSTANCE_ROLE_ARN: {{ include "runyard.minio.roleArn" . | quote }}
{{- end }}
{{- else }}
{{- with .Values.artifacts.s3.stsEndpoint }}
AWS_ENDPOINT_URL_STS: {{ . | quote }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.extraConfig }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* Pod parts ---------------------------------------------------------------------- */}}

{{/* Settings from the ConfigMap, secrets one key at a time (an existingSecret may hold
more); .s3Keys names the Secret of the server's S3 keys, for the API and the worker. */}}
{{- define "runyard.env" -}}
{{- $secret := .secret -}}
envFrom:
  - configMapRef:
      name: {{ .configMap }}
env:
{{- range list "RUNYARD_DATABASE_URL" "RUNYARD_BROKER_URL" "RUNYARD_SECRET_KEY" }}
  - name: {{ . }}
    valueFrom:
      secretKeyRef:
        name: {{ $secret }}
        key: {{ . }}
{{- end }}
  # Every API replica serves the same admin token (the chart's Secret always holds one;
  # without it in an existingSecret, each API pod mints its own).
  - name: RUNYARD_ADMIN_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ $secret }}
        key: RUNYARD_ADMIN_TOKEN
        optional: true
{{- with .s3Keys }}
  # The server's own S3 keys, for the parts that store and read artifacts.
{{- range list "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" "AWS_SESSION_TOKEN" }}
  - name: {{ . }}
    valueFrom:
      secretKeyRef:
        name: {{ $.s3Keys }}
        key: {{ . }}
        {{- if eq . "AWS_SESSION_TOKEN" }}
        optional: true
        {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* RUNYARD_HOME and /tmp are scratch space (the root filesystem is read-only); the
artifact claim, if any, is mounted at the artifact root. */}}
{{- define "runyard.volumeMounts" -}}
- name: home
  mountPath: /var/lib/runyard
- name: tmp
  mountPath: /tmp
{{- if and .artifacts (include "runyard.artifactPath" .ctx) }}
- name: artifacts
  mountPath: {{ include "runyard.artifactPath" .ctx }}
{{- end }}
{{- end }}

{{- define "runyard.volumes" -}}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if and .artifacts (include "runyard.artifactPath" .ctx) }}
- name: artifacts
  persistentVolumeClaim:
    claimName: {{ include "runyard.artifactClaim" .ctx }}
{{- end }}
{{- end }}

{{- define "runyard.podScheduling" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "runyard.podMetadata" -}}
labels:
  {{- include "runyard.selectorLabels" . | nindent 2 }}
  {{- with .ctx.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include "runyard.configData" .ctx | sha256sum }}
  {{- if not .ctx.Values.existingSecret }}
  checksum/secret: {{ include "runyard.secretData" .ctx | sha256sum }}
  {{- end }}
  {{- if include "runyard.minio.ownSecret" .ctx }}
  checksum/minio: {{ include "runyard.minio.secretData" .ctx | sha256sum }}
  {{- end }}
  {{- with .ctx.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
