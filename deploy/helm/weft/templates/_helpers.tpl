{{/*
Names, labels and the pieces every weft container shares.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "weft.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name: fullnameOverride, or <release>-<chart> (the release alone when it already holds the chart name). Service names get a suffix of up to 11 characters, hence 52. */}}
{{- define "weft.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "weft.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels; called with (dict "root" $ "component" NAME), component may be "". */}}
{{- define "weft.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weft.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* Every label; called like weft.selectorLabels. */}}
{{- define "weft.labels" -}}
helm.sh/chart: {{ include "weft.chart" .root }}
{{ include "weft.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: weft
{{- end }}

{{/* The image reference. */}}
{{- define "weft.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The ServiceAccount of the services' pods. */}}
{{- define "weft.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "weft.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The gRPC URL of one of this release's services: (dict "root" $ "service" KEY). */}}
{{- define "weft.serviceUrl" -}}
{{- $svc := index .root.Values.services .service }}
{{- printf "http://%s-%s:%v" (include "weft.fullname" .root) (kebabcase .service) $svc.port }}
{{- end }}

{{/* The peers' URLs: internalUrls.*, else this release's Services. */}}
{{- define "weft.routerUrl" -}}
{{- .Values.internalUrls.router | default (include "weft.serviceUrl" (dict "root" . "service" "router")) }}
{{- end }}
{{- define "weft.substrateUrl" -}}
{{- .Values.internalUrls.substrate | default (include "weft.serviceUrl" (dict "root" . "service" "substrate")) }}
{{- end }}
{{- define "weft.mcpBridgeUrl" -}}
{{- .Values.internalUrls.mcpBridge | default (include "weft.serviceUrl" (dict "root" . "service" "mcpBridge")) }}
{{- end }}

{{/*
The secret environment of a weft container, by reference to secrets.existingSecret:
(dict "root" $ "database" BOOL). Only the services that open Postgres get its URL.
*/}}
{{- define "weft.secretEnv" -}}
{{- $secret := required "secrets.existingSecret must name a Secret holding the database URL and the internal JWT key" .root.Values.secrets.existingSecret }}
{{- if .database }}
- name: WEFT_DATABASE__URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .root.Values.secrets.keys.databaseUrl }}
{{- end }}
- name: WEFT_AUTH__INTERNAL_JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .root.Values.secrets.keys.internalJwtSecret }}
{{- if .root.Values.secrets.keys.redisUrl }}
- name: WEFT_REDIS__URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .root.Values.secrets.keys.redisUrl }}
{{- end }}
{{- end }}

{{/* The services that open Postgres (gateway, executor, substrate, ingress; the router and the MCP bridge do not). */}}
{{- define "weft.usesDatabase" -}}
{{- if has . (list "gateway" "executor" "substrate" "ingress") }}true{{ end }}
{{- end }}
