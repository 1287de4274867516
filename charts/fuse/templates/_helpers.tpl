{{/* The prefix of every object's name: the release's name. */}}
{{- define "fuse.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "fuse.labels" -}}
app.kubernetes.io/name: fuse
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fuse.selector" -}}
app.kubernetes.io/name: fuse
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Secret that holds the job's secret (key secret-key). */}}
{{- define "fuse.jobSecretName" -}}
{{- .Values.jobSecret.existingSecret | default (printf "%s-job-secret" (include "fuse.fullname" .)) -}}
{{- end -}}

{{- define "fuse.sshSecretName" -}}
{{- .Values.ssh.existingSecret | default (printf "%s-ssh" (include "fuse.fullname" .)) -}}
{{- end -}}

{{/* Slots per worker pod: one per GPU when the pods have GPUs. */}}
{{- define "fuse.slots" -}}
{{- if gt (int .Values.workers.gpus) 0 -}}{{ int .Values.workers.gpus }}{{- else -}}{{ int .Values.workers.slots }}{{- end -}}
{{- end -}}

{{- define "fuse.driverHost" -}}
{{- printf "%s-driver" (include "fuse.fullname" .) -}}
{{- end -}}

{{/* Variables every pod gets: the job's secret (from the Secret, never a value) and the user's. */}}
{{- define "fuse.env" -}}
- name: FUSE_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "fuse.jobSecretName" . }}
      key: secret-key
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "fuse.image" -}}
image: {{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}
