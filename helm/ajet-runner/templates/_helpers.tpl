{{/* vim: set filetype=mustache: */}}

{{/* Chart name, overridable. */}}
{{- define "ajet-runner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name; truncated to 63 chars (DNS label limit), minus room for suffixes. */}}
{{- define "ajet-runner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ajet-runner.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Common labels. */}}
{{- define "ajet-runner.labels" -}}
helm.sh/chart: {{ include "ajet-runner.chart" . }}
{{ include "ajet-runner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels (immutable in Deployments/DaemonSets/StatefulSets: never add to these). */}}
{{- define "ajet-runner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ajet-runner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component: (dict "ctx" $ "component" "api") */}}
{{- define "ajet-runner.componentLabels" -}}
{{ include "ajet-runner.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ajet-runner.componentSelectorLabels" -}}
{{ include "ajet-runner.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* commonAnnotations as a metadata block, or nothing. */}}
{{- define "ajet-runner.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "ajet-runner.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ajet-runner.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The image reference: registry + repository, then "@digest" or ":tag". A repository that already names a
registry (its first part has a "." or ":", or is "localhost") is used as is, so
`--set image.repository=myreg.io/ajet-runner` means myreg.io/ajet-runner, never ghcr.io/myreg.io/...;
an empty registry means the repository alone.
*/}}
{{- define "ajet-runner.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag | toString -}}
{{- $repo := .Values.image.repository | trimPrefix "/" -}}
{{- $first := index (splitList "/" $repo) 0 -}}
{{- $hasRegistry := and (contains "/" $repo) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $name := $repo -}}
{{- if and .Values.image.registry (not $hasRegistry) -}}
{{- $name = printf "%s/%s" (.Values.image.registry | trimSuffix "/") $repo -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $name .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name $tag -}}
{{- end -}}
{{- end -}}

{{- define "ajet-runner.redis.image" -}}
{{- printf "%s/%s:%s" .Values.redis.image.registry .Values.redis.image.repository (toString .Values.redis.image.tag) -}}
{{- end -}}

{{- define "ajet-runner.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The chart's own Secret (token, Redis password, external Redis URL). */}}
{{- define "ajet-runner.secretName" -}}
{{- include "ajet-runner.fullname" . -}}
{{- end -}}

{{- define "ajet-runner.tokenSecretName" -}}
{{- default (include "ajet-runner.secretName" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "ajet-runner.tokenSecretKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.existingSecretTokenKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "ajet-runner.redis.fullname" -}}
{{- printf "%s-redis" (include "ajet-runner.fullname" .) -}}
{{- end -}}

{{- define "ajet-runner.redis.host" -}}
{{- printf "%s.%s.svc.%s" (include "ajet-runner.redis.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "ajet-runner.redis.passwordSecretName" -}}
{{- default (include "ajet-runner.secretName" .) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{- define "ajet-runner.redis.passwordSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecretPasswordKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}

{{/* Does the chart create its own Secret? */}}
{{- define "ajet-runner.createSecret" -}}
{{- if not .Values.auth.existingSecret -}}true{{- end -}}
{{- if and .Values.redis.bundled .Values.redis.auth.enabled (not .Values.redis.auth.existingSecret) -}}true{{- end -}}
{{- if and (not .Values.redis.bundled) (not .Values.redis.external.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/*
A Secret value that survives upgrades: the given value, else the one already in the cluster's Secret
(lookup; empty under "helm template"), else a fresh random one.
Usage: include "ajet-runner.secretValue" (dict "ctx" $ "key" "token" "value" .Values.auth.token)
*/}}
{{- define "ajet-runner.secretValue" -}}
{{- if .value -}}
{{- .value | toString | b64enc -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace (include "ajet-runner.secretName" .ctx) -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key -}}
{{- else -}}
{{- randAlphaNum 40 | b64enc -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The bundled Redis's headless Service domain: <pod>.<this> names one Redis pod. */}}
{{- define "ajet-runner.redis.headless" -}}
{{- printf "%s.%s.svc.%s" (include "ajet-runner.redis.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* With Sentinel: host:port of every pod's sentinel, comma-separated (AJET_RUNNER_REDIS_SENTINELS). */}}
{{- define "ajet-runner.redis.sentinels" -}}
{{- $members := list -}}
{{- range $i := until (int .Values.redis.sentinel.replicas) -}}
{{- $members = append $members (printf "%s-%d.%s:%d" (include "ajet-runner.redis.fullname" $) $i (include "ajet-runner.redis.headless" $) (int $.Values.redis.sentinel.port)) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* REDIS_URL (and REDIS_PASSWORD for the bundled Redis) for every runner container; with Sentinel, the
sentinels, the master's name and the password (AJET_RUNNER_REDIS_SENTINELS/_MASTER/_PASSWORD) instead. */}}
{{- define "ajet-runner.redisEnv" -}}
{{- if and .Values.redis.bundled .Values.redis.sentinel.enabled }}
- name: AJET_RUNNER_REDIS_SENTINELS
  value: {{ include "ajet-runner.redis.sentinels" . | quote }}
- name: AJET_RUNNER_REDIS_MASTER
  value: {{ .Values.redis.sentinel.masterName | quote }}
{{- if .Values.redis.auth.enabled }}
- name: AJET_RUNNER_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "ajet-runner.redis.passwordSecretName" . }}
      key: {{ include "ajet-runner.redis.passwordSecretKey" . }}
{{- end }}
{{- else if .Values.redis.bundled }}
{{- if .Values.redis.auth.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "ajet-runner.redis.passwordSecretName" . }}
      key: {{ include "ajet-runner.redis.passwordSecretKey" . }}
- name: REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/0" (include "ajet-runner.redis.host" .) | quote }}
{{- else }}
- name: REDIS_URL
  value: {{ printf "redis://%s:6379/0" (include "ajet-runner.redis.host" .) | quote }}
{{- end }}
{{- else }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (include "ajet-runner.secretName" .) .Values.redis.external.existingSecret }}
      key: {{ ternary .Values.redis.external.existingSecretKey "redis-url" (not (empty .Values.redis.external.existingSecret)) }}
{{- end }}
{{- end -}}

{{/* Settings shared by the API and the workers. */}}
{{- define "ajet-runner.configEnv" -}}
{{- $roots := .Values.config.allowedRoots -}}
{{- if and (not $roots) (ne .Values.storage.type "none") -}}
{{- $roots = list .Values.storage.mountPath -}}
{{- end }}
- name: AJET_RUNNER_ALLOWED_ROOTS
  value: {{ join ":" $roots | quote }}
- name: AJET_RUNNER_STALL_SECONDS
  value: {{ .Values.config.stallSeconds | toString | quote }}
- name: AJET_RUNNER_REPAIR_BUDGET
  value: {{ .Values.config.repairBudget | toString | quote }}
- name: AJET_RUNNER_REPAIR_BUDGET_PER_SIGNATURE
  value: {{ .Values.config.repairBudgetPerSignature | toString | quote }}
- name: AJET_RUNNER_STOP_GRACE_SECONDS
  value: {{ .Values.config.stopGraceSeconds | toString | quote }}
{{- range $name, $value := .Values.config.extraEnv }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The shared storage volume (none when storage.type is "none"). */}}
{{- define "ajet-runner.storageVolume" -}}
{{- if eq .Values.storage.type "hostPath" }}
- name: data
  hostPath:
    path: {{ default .Values.storage.mountPath .Values.storage.hostPath.path }}
    type: {{ .Values.storage.hostPath.type }}
{{- else if eq .Values.storage.type "pvc" }}
- name: data
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-data" (include "ajet-runner.fullname" .)) .Values.storage.pvc.existingClaim }}
{{- end }}
{{- with .Values.storage.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* (dict "ctx" $ "readOnly" bool) */}}
{{- define "ajet-runner.storageVolumeMount" -}}
{{- if ne .ctx.Values.storage.type "none" }}
- name: data
  mountPath: {{ .ctx.Values.storage.mountPath }}
  {{- if .readOnly }}
  readOnly: true
  {{- end }}
{{- end }}
{{- with .ctx.Values.storage.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Is a Prometheus-operator object wanted? (dict "ctx" $ "enabled" <auto|true|false>) -> "true" or "".
"auto" follows the cluster: .Capabilities.APIVersions.Has "monitoring.coreos.com/v1".
*/}}
{{- define "ajet-runner.monitoringWanted" -}}
{{- if eq (toString .enabled) "auto" -}}
{{- if .ctx.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- else if eq (toString .enabled) "true" -}}
true
{{- end -}}
{{- end -}}
