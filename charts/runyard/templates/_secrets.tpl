{{/* Secrets -------------------------------------------------------------------------- */}}

{{/* The chart's own secret values, as JSON: each the one given in values, else the one the
chart's Secrets already hold (an earlier install's, read back with lookup, so an upgrade or
a reinstall keeps them; `helm template` finds none), else a new random one. Computed once
per render and kept on the root context, so the Secrets, the migration hook's copy and the
pods' checksums all hold the same values. The MinIO Secret's keys are apart from the
others (AWS_*), so one dict holds both. */}}
{{- define "runyard.secrets" -}}
{{- if not (hasKey . "RunyardSecrets") }}
{{- $kept := dict }}
{{- range $secret := list (include "runyard.fullname" .) (include "runyard.minio.secretName" .) }}
{{- $kept = merge $kept ((lookup "v1" "Secret" $.Release.Namespace $secret).data | default dict) }}
{{- end }}
{{- $given := dict "RUNYARD_SECRET_KEY" .Values.secretKey "RUNYARD_ADMIN_TOKEN" .Values.adminToken }}
{{- $fresh := dict "RUNYARD_SECRET_KEY" (randAlphaNum 64) "RUNYARD_ADMIN_TOKEN" (printf "ry_%s" (randAlphaNum 40)) }}
{{- if include "runyard.postgresql.enabled" . }}
{{- $_ := set $fresh "POSTGRES_PASSWORD" (randAlphaNum 32) }}
{{- end }}
{{- if include "runyard.redis.enabled" . }}
{{- $_ := set $fresh "REDIS_PASSWORD" (randAlphaNum 32) }}
{{- end }}
{{- if include "runyard.minio.ownSecret" . }}
{{- $_ := set $fresh "AWS_ACCESS_KEY_ID" (randAlphaNum 20 | upper) }}
{{- $_ := set $fresh "AWS_SECRET_ACCESS_KEY" (randAlphaNum 40) }}
{{- end }}
{{- $secrets := dict }}
{{- range $key, $new := $fresh }}
{{- $value := index $given $key | default "" }}
{{- if and (not $value) (hasKey $kept $key) }}
{{- $value = index $kept $key | b64dec }}
{{- end }}
{{- $_ := set $secrets $key (default $new $value) }}
{{- end }}
{{- $_ := set . "RunyardSecrets" $secrets }}
{{- end }}
{{- toJson .RunyardSecrets }}
{{- end }}

{{- define "runyard.secretData" -}}
{{- $secrets := include "runyard.secrets" . | fromJson }}
{{- if include "runyard.postgresql.enabled" . -}}
RUNYARD_DATABASE_URL: {{ printf "postgresql://runyard:%s@%s:5432/runyard" $secrets.POSTGRES_PASSWORD (include "runyard.databaseHost" (dict "ctx" . "component" "postgresql")) | quote }}
POSTGRES_PASSWORD: {{ $secrets.POSTGRES_PASSWORD | quote }}
{{- else -}}
RUNYARD_DATABASE_URL: {{ required "database.url is required with postgresql.enabled false: the PostgreSQL URL (RUNYARD_DATABASE_URL), e.g. --set database.url=postgresql://runyard:PASSWORD@postgres:5432/runyard, unless existingSecret names a Secret that holds it" .Values.database.url | quote }}
{{- end }}
{{- if include "runyard.redis.enabled" . }}
RUNYARD_BROKER_URL: {{ printf "redis://:%s@%s:6379/0" $secrets.REDIS_PASSWORD (include "runyard.databaseHost" (dict "ctx" . "component" "redis")) | quote }}
REDIS_PASSWORD: {{ $secrets.REDIS_PASSWORD | quote }}
{{- else }}
RUNYARD_BROKER_URL: {{ required "broker.url is required with redis.enabled false: the Redis or RabbitMQ URL (RUNYARD_BROKER_URL), e.g. --set broker.url=redis://redis:6379/0, unless existingSecret names a Secret that holds it" .Values.broker.url | quote }}
{{- end }}
RUNYARD_SECRET_KEY: {{ $secrets.RUNYARD_SECRET_KEY | quote }}
RUNYARD_ADMIN_TOKEN: {{ $secrets.RUNYARD_ADMIN_TOKEN | quote }}
{{- end }}

{{/* S3 ----------------------------------------------------------------------------- */}}

{{/* Where S3 is, as boto3 reads it: for the ConfigMap, and for job pods' Secret. */}}
{{- define "runyard.s3Endpoint" -}}
{{- if include "runyard.minio.enabled" . }}
AWS_ENDPOINT_URL_S3: {{ include "runyard.minio.url" . | quote }}
AWS_REGION: {{ include "runyard.minio.region" . | quote }}
AWS_DEFAULT_REGION: {{ include "runyard.minio.region" . | quote }}
{{- end }}
{{- with .Values.artifacts.s3.endpoint }}
AWS_ENDPOINT_URL_S3: {{ . | quote }}
{{- end }}
{{- with .Values.artifacts.s3.region }}
AWS_REGION: {{ . | quote }}
AWS_DEFAULT_REGION: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The Secret holding the server's own S3 keys, if any: MinIO's root keys with the
chart's own MinIO, else the operator's, or the chart's made of artifacts.s3.accessKeyId and
secretAccessKey. */}}
{{- define "runyard.s3KeysSecret" -}}
{{- if include "runyard.minio.enabled" . }}
{{- include "runyard.minio.secretName" . }}
{{- else if .Values.artifacts.s3.existingSecret }}
{{- .Values.artifacts.s3.existingSecret }}
{{- else if or .Values.artifacts.s3.accessKeyId .Values.artifacts.s3.secretAccessKey }}
{{- include "runyard.componentName" (dict "ctx" . "component" "s3") }}
{{- end }}
{{- end }}

{{/* The Secret job pods take S3's endpoint and region from (and, with
RUNYARD_INSTANCE_CREDENTIALS=machine, keys, where the operator's holds them): the operator's
own (kubernetes.s3_secret), else one the chart makes of artifacts.s3's endpoint and region.
Never the server's keys: a job's credentials are its own. */}}
{{- define "runyard.jobS3Secret" -}}
{{- if .Values.kubernetes.s3_secret }}
{{- .Values.kubernetes.s3_secret }}
{{- else if include "runyard.s3Endpoint" . }}
{{- include "runyard.componentName" (dict "ctx" . "component" "job-s3") }}
{{- end }}
{{- end }}

{{/* The job pods' service account: one the chart creates (jobServiceAccount), or the
operator's (kubernetes.service_account), or none (the namespace's default). */}}
{{- define "runyard.jobServiceAccountName" -}}
{{- if .Values.jobServiceAccount.create }}
{{- default (include "runyard.componentName" (dict "ctx" . "component" "job")) .Values.kubernetes.service_account }}
{{- else }}
{{- .Values.kubernetes.service_account }}
{{- end }}
{{- end }}
