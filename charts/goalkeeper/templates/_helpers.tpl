{{- define "goalkeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "goalkeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "goalkeeper.labels" -}}
{{ include "goalkeeper.selectorLabels" . }}
app.kubernetes.io/part-of: goalkeeper
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "goalkeeper.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (printf "%s-operator" (include "goalkeeper.fullname" .)) -}}
{{- end -}}

{{- define "goalkeeper.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "goalkeeper.fullname" .) -}}
{{- end -}}

{{/* A shard's Lease: the release's own, with the shard's name after it. */}}
{{- define "goalkeeper.shardLeaseName" -}}
{{- $lease := include "goalkeeper.leaseName" .root -}}
{{- ternary $lease (printf "%s-%s" $lease .shard) (eq .shard "") -}}
{{- end -}}

{{- define "goalkeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The operator's rules on namespaced resources: config/rbac/operator.yaml, in step. */}}
{{- define "goalkeeper.operatorNamespacedRules" -}}
- apiGroups: [goalkeeper.dev]
  resources: [monitors]
  verbs: [get, list, watch]
- apiGroups: [goalkeeper.dev]
  resources: [monitors/status]
  verbs: [get, patch]
- apiGroups: [goalkeeper.dev]
  resources: [monitorsteps]
  # deletecollection: old steps are pruned in batches, one request each. patch: a check's
  # report is kept on its observe step (annotations only; a step's status is its pod's).
  verbs: [get, list, watch, create, patch, delete, deletecollection]
# A monitor awaiting approval reads the answers people created.
- apiGroups: [goalkeeper.dev]
  resources: [monitorapprovals]
  verbs: [get, list, watch]
# The model a namespace's Monitors use; the operator keeps who spent what through it.
- apiGroups: [goalkeeper.dev]
  resources: [modelconfigs]
  verbs: [get, list, watch]
- apiGroups: [goalkeeper.dev]
  resources: [modelconfigs/status]
  verbs: [patch]
# Where the news of a namespace's Monitors goes; a sink's status says whether it arrives.
- apiGroups: [goalkeeper.dev]
  resources: [notificationsinks]
  verbs: [get, list, watch]
- apiGroups: [goalkeeper.dev]
  resources: [notificationsinks/status]
  verbs: [patch]
# Owner references with blockOwnerDeletion need update on the owner's finalizers.
- apiGroups: [goalkeeper.dev]
  resources: [monitors/finalizers, monitorsteps/finalizers]
  verbs: [update]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create]
# get: an Event found under a report's name is used only when it is this Monitor's.
- apiGroups: [""]
  resources: [events]
  verbs: [create, get]
# list, watch: step pods are watched (by label) for the check that a result's pod is the Job's.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get]
# The namespace admin's instructions, read with a Monitor's task (that one ConfigMap only).
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [goalkeeper-instructions]
  verbs: [get]
# The sinks' webhook URLs: that one Secret of a namespace, never any other.
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [goalkeeper-notifications]
  verbs: [get]
# list, watch: event wakes watch the target workloads a waiting monitor names.
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [list, watch]
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets, replicasets]
  verbs: [list, watch]
{{- end -}}

{{/* Cluster-scoped reads kopf needs to discover resources and namespaces. */}}
{{- define "goalkeeper.operatorClusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}

{{/* The step roles' shared reads: config/rbac/steps.yaml, in step. */}}
{{- define "goalkeeper.stepReadRules" -}}
- apiGroups: [""]
  resources: [pods, pods/log, services, endpoints, configmaps, events, persistentvolumeclaims]
  verbs: [get, list, watch]
{{- end -}}

{{- define "goalkeeper.stepResultRules" -}}
- apiGroups: [goalkeeper.dev]
  resources: [monitorsteps]
  verbs: [get]
- apiGroups: [goalkeeper.dev]
  resources: [monitorsteps/status]
  verbs: [get, patch]
{{- end -}}

{{/* A value as an env string; whole numbers without an exponent (values arrive as floats). */}}
{{- define "goalkeeper.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . | toString | quote -}}
{{- else -}}
{{- toString . | quote -}}
{{- end -}}
{{- end -}}
