{{/* Labels of every object: the component's name (also its selector) plus Helm's standard ones.
Call with (dict "name" "mlgate-webhook" "root" $). */}}
{{- define "mlgate.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: mlgate
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "mlgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The pod's scheduling and pull settings, shared by both Deployments. Call with (dict "pod" .Values.webhook "root" $). */}}
{{- define "mlgate.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .pod.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .pod.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .pod.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
