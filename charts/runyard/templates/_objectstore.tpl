{{/* The chart's own object store -------------------------------------------------------- */}}

{{/* "true" when the chart runs its own MinIO, else "". `auto` runs it unless
artifacts.root names a store. */}}
{{- define "runyard.minio.enabled" -}}
{{- $enabled := toString .Values.minio.enabled }}
{{- if eq $enabled "true" }}
{{- if .Values.artifacts.root }}
{{- fail "minio.enabled is true and artifacts.root is set: leave artifacts.root empty to keep artifacts in the chart's own MinIO, or set minio.enabled to auto or false" }}
{{- end }}
{{- "true" }}
{{- else if and (eq $enabled "auto") (not .Values.artifacts.root) }}
{{- "true" }}
{{- end }}
{{- end }}

{{/* RUNYARD_ARTIFACT_ROOT: the one given, else the chart's own MinIO's bucket. With the
chart's MinIO, artifacts.s3 says nothing: the chart wires the store itself. */}}
{{- define "runyard.artifactRoot" -}}
{{- if include "runyard.minio.enabled" . }}
{{- range $key, $value := .Values.artifacts.s3 }}
{{- if $value }}
{{- fail (printf "artifacts.s3.%s is set, but artifacts.root is empty, so the chart's own MinIO holds artifacts (and the chart wires it): name your store in artifacts.root to use artifacts.s3" $key) }}
{{- end }}
{{- end }}
{{- printf "s3://%s" .Values.minio.bucket }}
{{- else }}
{{- required "artifacts.root is required with minio.enabled false: s3://<bucket>/<prefix> on a store of yours (artifacts.s3), or file:///<path> on a ReadWriteMany claim (artifacts.persistence)" .Values.artifacts.root }}
{{- end }}
{{- end }}

{{/* Where the chart's MinIO answers S3 and STS, for the server and job pods alike. */}}
{{- define "runyard.minio.url" -}}
{{- printf "http://%s:9000" (include "runyard.databaseHost" (dict "ctx" . "component" "minio")) }}
{{- end }}

{{/* MinIO's own region, which every client signs its requests for. */}}
{{- define "runyard.minio.region" -}}
us-east-1
{{- end }}

{{/* The Secret of MinIO's root keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): the
operator's, or one the chart makes. */}}
{{- define "runyard.minio.secretName" -}}
{{- default (include "runyard.componentName" (dict "ctx" . "component" "minio")) .Values.minio.existingSecret }}
{{- end }}

{{/* "true" when the chart makes that Secret itself. */}}
{{- define "runyard.minio.ownSecret" -}}
{{- if and (include "runyard.minio.enabled" .) (not .Values.minio.existingSecret) }}
{{- "true" }}
{{- end }}
{{- end }}

{{- define "runyard.minio.secretData" -}}
{{- $secrets := include "runyard.secrets" . | fromJson -}}
AWS_ACCESS_KEY_ID: {{ $secrets.AWS_ACCESS_KEY_ID | quote }}
AWS_SECRET_ACCESS_KEY: {{ $secrets.AWS_SECRET_ACCESS_KEY | quote }}
{{- end }}

{{/* MinIO answers AssumeRole for any role: what a job's credentials allow is its session
policy (its own locations) within what the server's keys allow. The service asks
AssumeRole only with a role to name (GetFederationToken otherwise, which MinIO does not
offer), so it is given one that names no real role. */}}
{{- define "runyard.minio.roleArn" -}}
arn:aws:iam::000000000000:role/runyard-jobs
{{- end }}

{{/* The official MinIO images run as root unless told otherwise; any user will do. */}}
{{- define "runyard.minio.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 1000
fsGroup: 1000
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "runyard.minio.securityContext" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 1000
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end }}
