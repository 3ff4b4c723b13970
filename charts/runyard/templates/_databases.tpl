{{/* Bundled databases ---------------------------------------------------------------- */}}

{{/* "true" when the chart runs its own PostgreSQL or Redis (.name), else "". `auto` runs
it unless its URL (.value, given as .url) is set or existingSecret holds the URLs. */}}
{{- define "runyard.bundled" -}}
{{- $enabled := toString (index .ctx.Values .name).enabled }}
{{- if eq $enabled "true" }}
{{- if .url }}
{{- fail (printf "%s.enabled is true and %s is set: leave %s empty to use the chart's own, or set %s.enabled to auto or false" .name .value .value .name) }}
{{- end }}
{{- if .ctx.Values.existingSecret }}
{{- fail (printf "%s.enabled is true and existingSecret is set: the chart's own %s keeps its password in the chart's Secret; set %s.enabled to auto or false and put the URL in existingSecret" .name .name .name) }}
{{- end }}
{{- "true" }}
{{- else if and (eq $enabled "auto") (not .url) (not .ctx.Values.existingSecret) }}
{{- "true" }}
{{- end }}
{{- end }}

{{- define "runyard.postgresql.enabled" -}}
{{- include "runyard.bundled" (dict "ctx" . "name" "postgresql" "value" "database.url" "url" .Values.database.url) }}
{{- end }}

{{- define "runyard.redis.enabled" -}}
{{- include "runyard.bundled" (dict "ctx" . "name" "redis" "value" "broker.url" "url" .Values.broker.url) }}
{{- end }}

{{/* The in-cluster address of a bundled database's Service (.component). */}}
{{- define "runyard.databaseHost" -}}
{{- printf "%s.%s.svc.%s" (include "runyard.componentName" .) .ctx.Release.Namespace .ctx.Values.clusterDomain }}
{{- end }}

{{- define "runyard.databaseImage" -}}
{{- printf "%s:%s" .image.repository .image.tag }}
{{- end }}

{{/* What the official postgres and redis images (Debian) run as: their own user, 999. */}}
{{- define "runyard.databasePodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 999
runAsGroup: 999
fsGroup: 999
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "runyard.databaseSecurityContext" -}}
runAsNonRoot: true
runAsUser: 999
runAsGroup: 999
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end }}

{{/* With the chart's own PostgreSQL, a pod that needs the database at once (the API,
which migrates before it listens, and the migration) first waits until it accepts
connections: at install it starts alongside them. The script is fixed text; where it
connects comes from the environment, which pg_isready reads itself. */}}
{{- define "runyard.waitForPostgresql" -}}
{{- if include "runyard.postgresql.enabled" . -}}
initContainers:
  - name: wait-for-postgresql
    image: {{ include "runyard.databaseImage" .Values.postgresql }}
    imagePullPolicy: {{ .Values.postgresql.image.pullPolicy }}
    command: ["sh", "-c", "until pg_isready --quiet; do sleep 2; done"]
    env:
      - name: PGHOST
        value: {{ include "runyard.databaseHost" (dict "ctx" . "component" "postgresql") }}
      - name: PGPORT
        value: "5432"
      - name: PGUSER
        value: runyard
      - name: PGDATABASE
        value: runyard
    securityContext:
      {{- include "runyard.databaseSecurityContext" . | nindent 6 }}
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
      limits:
        cpu: 100m
        memory: 64Mi
{{- end }}
{{- end }}
