{{/*
One operator Deployment: the release's own (shard "") or a named shard's. With shards
set, the release's own takes every Monitor no named shard's label selects.
Called with (dict "root" $ "shard" NAME).
*/}}
{{- define "goalkeeper.deployment" -}}
{{- $shard := .shard -}}
{{- with .root -}}
{{- $fullname := include "goalkeeper.fullname" . -}}
{{- $shards := .Values.shards | default list -}}
{{- $name := ternary $fullname (printf "%s-shard-%s" $fullname $shard) (eq $shard "") -}}
{{- $podShard := "" -}}
{{- $selector := "" -}}
{{- if $shards -}}
{{- $podShard = $shard | default "default" -}}
{{- $selector = ternary (printf "goalkeeper.dev/shard notin (%s)" (join "," $shards)) (printf "goalkeeper.dev/shard=%s" $shard) (eq $shard "") -}}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "goalkeeper.labels" . | nindent 4 }}
    {{- with $podShard }}
    goalkeeper.dev/operator-shard: {{ . }}
    {{- end }}
spec:
  replicas: {{ .Values.replicas }}
  {{- if .Values.leaderElection.enabled }}
  # The new pod waits as a standby until the old one hands the Lease over on exit.
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  {{- else }}
  # Never two operators at once: without leader election both would act.
  strategy: {type: Recreate}
  {{- end }}
  selector:
    matchLabels:
      {{- include "goalkeeper.selectorLabels" . | nindent 6 }}
      {{- with $podShard }}
      goalkeeper.dev/operator-shard: {{ . }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- include "goalkeeper.labels" . | nindent 8 }}
        {{- with $podShard }}
        goalkeeper.dev/operator-shard: {{ . }}
        {{- end }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "goalkeeper.serviceAccountName" . }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      containers:
        - name: operator
          image: {{ include "goalkeeper.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: [goalkeeper]
          args:
            - run
            {{- if eq .Values.logLevel "debug" }}
            - --verbose
            {{- end }}
          env:
            - {name: GOALKEEPER_MODEL, value: {{ .Values.model.name | quote }}}
            {{- with .Values.instructions }}
            - {name: GOALKEEPER_INSTRUCTIONS, value: {{ . | quote }}}
            {{- end }}
            {{- with .Values.tracing }}
            {{- if .endpoint }}
            - {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ .endpoint | quote }}}
            - {name: OTEL_EXPORTER_OTLP_PROTOCOL, value: http/protobuf}
            - {name: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, value: {{ .captureContent | toString | quote }}}
            {{- end }}
            {{- end }}
            {{- with .Values.notifications }}
            {{- if .urlSecret.name }}
            - name: GOALKEEPER_NOTIFY_URL
              valueFrom: {secretKeyRef: {name: {{ .urlSecret.name | quote }}, key: {{ .urlSecret.key | quote }}}}
            - {name: GOALKEEPER_NOTIFY_FORMAT, value: {{ .format | quote }}}
            - {name: GOALKEEPER_NOTIFY_SEND, value: {{ join "," .send | quote }}}
            {{- end }}
            {{- end }}
            - {name: GOALKEEPER_MODEL_BASE_URL, value: {{ .Values.model.baseUrl | quote }}}
            - {name: GOALKEEPER_MODEL_API_KEY_SECRET, value: {{ .Values.model.apiKeySecret.name | quote }}}
            - {name: GOALKEEPER_MODEL_API_KEY_SECRET_KEY, value: {{ .Values.model.apiKeySecret.key | quote }}}
            - {name: GOALKEEPER_STEP_IMAGE, value: {{ .Values.steps.image | default (include "goalkeeper.image" .) | quote }}}
            - {name: GOALKEEPER_OBSERVER_SERVICE_ACCOUNT, value: {{ .Values.steps.observerServiceAccount | quote }}}
            - {name: GOALKEEPER_ACTOR_SERVICE_ACCOUNT, value: {{ .Values.steps.actorServiceAccount | quote }}}
            - {name: GOALKEEPER_STEP_DEADLINE_SECONDS, value: {{ include "goalkeeper.envValue" .Values.steps.deadlineSeconds }}}
            - {name: GOALKEEPER_STEP_HISTORY, value: {{ include "goalkeeper.envValue" .Values.steps.history }}}
            - {name: GOALKEEPER_NAMESPACES, value: {{ join "," .Values.watchNamespaces | quote }}}
            - {name: GOALKEEPER_RESYNC_SECONDS, value: {{ include "goalkeeper.envValue" .Values.resyncSeconds }}}
            - {name: GOALKEEPER_STALL_CHECKS, value: {{ include "goalkeeper.envValue" .Values.stallChecks }}}
            - {name: GOALKEEPER_STEP_RETRY_SECONDS, value: {{ include "goalkeeper.envValue" .Values.stepRetrySeconds }}}
            - {name: GOALKEEPER_FAILURE_WINDOW_SECONDS, value: {{ include "goalkeeper.envValue" .Values.failureWindowSeconds }}}
            - {name: GOALKEEPER_INVALID_ANSWERS_LIMIT, value: {{ include "goalkeeper.envValue" .Values.invalidAnswersLimit }}}
            - {name: GOALKEEPER_BRAKE_ACTS, value: {{ include "goalkeeper.envValue" .Values.brakeActs }}}
            - {name: GOALKEEPER_WAKE_INTERVAL_SECONDS, value: {{ include "goalkeeper.envValue" .Values.wakeIntervalSeconds }}}
            - {name: GOALKEEPER_APPROVAL_TIMEOUT, value: {{ .Values.approvalTimeout | quote }}}
            - {name: GOALKEEPER_ACT_EXTRA_VERBS, value: {{ .Values.actExtraVerbs | quote }}}
            - {name: GOALKEEPER_CONFIRM_AUTHORITY, value: {{ .Values.confirmAuthority | quote }}}
            - {name: GOALKEEPER_HEALTH_PORT, value: {{ ternary .Values.probes.port 0 .Values.probes.enabled | toString | quote }}}
            - {name: GOALKEEPER_METRICS_PORT, value: {{ ternary .Values.metrics.port 0 .Values.metrics.enabled | toString | quote }}}
            {{- with $selector }}
            - {name: GOALKEEPER_SHARD_SELECTOR, value: {{ . | quote }}}
            {{- end }}
            {{- if ne $shard "" }}
            # One shard keeps the ModelConfigs' statuses: the release's own.
            - {name: GOALKEEPER_MODEL_CONFIG_STATUSES, value: "false"}
            {{- end }}
            - {name: GOALKEEPER_LEADER_ELECTION, value: {{ .Values.leaderElection.enabled | toString | quote }}}
            {{- if .Values.leaderElection.enabled }}
            - {name: GOALKEEPER_LEASE_NAME, value: {{ include "goalkeeper.shardLeaseName" (dict "root" . "shard" $shard) | quote }}}
            - {name: GOALKEEPER_LEASE_NAMESPACE, value: {{ .Release.Namespace | quote }}}
            - {name: GOALKEEPER_LEASE_SECONDS, value: {{ include "goalkeeper.envValue" .Values.leaderElection.leaseSeconds }}}
            - name: GOALKEEPER_IDENTITY
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            {{- end }}
            {{- with .Values.steps.repairCommand }}
            - {name: GOALKEEPER_REPAIR_COMMAND, value: {{ . | quote }}}
            {{- end }}
            {{- range $key, $value := .Values.steps.limits }}
            {{- if not (kindIs "invalid" $value) }}
            - {name: {{ printf "GOALKEEPER_%s" ($key | snakecase | upper) }}, value: {{ include "goalkeeper.envValue" $value }}}
            {{- end }}
            {{- end }}
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if or .Values.probes.enabled .Values.metrics.enabled }}
          ports:
            {{- if .Values.probes.enabled }}
            - {name: health, containerPort: {{ .Values.probes.port }}}
            {{- end }}
            {{- if .Values.metrics.enabled }}
            - {name: metrics, containerPort: {{ .Values.metrics.port }}}
            {{- end }}
          {{- end }}
          {{- if .Values.probes.enabled }}
          livenessProbe:
            httpGet: {path: /healthz, port: health}
            periodSeconds: 30
            timeoutSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet: {path: /healthz, port: health}
            periodSeconds: 10
            timeoutSeconds: 10
          {{- end }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          # The root filesystem is read-only; HOME and temp files live here.
          volumeMounts:
            - {name: tmp, mountPath: /tmp}
      volumes:
        - name: tmp
          emptyDir: {sizeLimit: 64Mi}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
{{- end -}}
