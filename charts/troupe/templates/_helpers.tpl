{{/*
The prefix of every object's name: fullnameOverride, else the release's name (cut to 50
characters, leaving room for suffixes such as -reconciler-leader-election).
*/}}
{{- define "troupe.name" -}}{{ .Values.fullnameOverride | default .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{/* The app.kubernetes.io/name label: nameOverride, else the chart's name. */}}
{{- define "troupe.appName" -}}{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{/* The image: repository@digest when image.digest is set (the tag is then not used), else repository:tag. */}}
{{- define "troupe.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end -}}
{{- define "troupe.labels" -}}
app.kubernetes.io/name: {{ include "troupe.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{/* Selector labels of one component: include with (list $ "webhook"). */}}
{{- define "troupe.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "troupe.appName" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}
{{/*
The pod template's metadata of one component, (list $ "webhook"): the chart's labels, the
component's podLabels (which may not replace a selector label), the configuration's
checksum and the component's podAnnotations.
*/}}
{{- define "troupe.podMetadata" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}
{{- $values := index $root.Values $component -}}
{{- $labels := fromYaml (include "troupe.labels" $root) -}}
{{- $_ := set $labels "app.kubernetes.io/component" $component -}}
{{- range $key, $value := ($values.podLabels | default dict) -}}
{{- if hasKey (fromYaml (include "troupe.selectorLabels" (list $root $component))) $key -}}
{{- fail (printf "%s.podLabels: %s is a selector label the chart sets; it may not be replaced" $component $key) -}}
{{- end -}}
{{- $_ := set $labels $key $value -}}
{{- end -}}
{{- $annotations := deepCopy ($values.podAnnotations | default dict) -}}
{{- $_ := set $annotations "checksum/config" (include "troupe.config" $root | sha256sum) -}}
labels: {{- toYaml $labels | nindent 2 }}
annotations: {{- toYaml $annotations | nindent 2 }}
{{- end -}}
{{/*
Where one component's pods go, (list $ "webhook"): imagePullSecrets, nodeSelector, affinity,
tolerations and topologySpreadConstraints of the component's values. The webhook, with more
than one replica and no constraints given, spreads its replicas over nodes.
*/}}
{{- define "troupe.podPlacement" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}
{{- $values := index $root.Values $component -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $values.topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml $values.topologySpreadConstraints | nindent 2 }}
{{- else if and (eq $component "webhook") (gt (int $values.replicas) 1) }}
# Replicas on different nodes when possible, so that one node going away leaves one answering.
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {{- include "troupe.selectorLabels" (list $root $component) | nindent 8 }}
{{- end }}
{{- end -}}
{{/*
The webhook pod's securityContext: podSecurityContext, and for a webhook port below 1024 the
namespaced sysctl net.ipv4.ip_unprivileged_port_start lowered to that port, so that the
non-root container may bind it (a "safe" sysctl, allowed by default since Kubernetes 1.22
and by the baseline Pod Security Standard:
https://kubernetes.io/docs/tasks/administer-cluster/sysctl-cluster/).
*/}}
{{- define "troupe.webhookPodSecurityContext" -}}
{{- $context := deepCopy (.Values.podSecurityContext | default dict) -}}
{{- $port := include "troupe.webhookPort" . -}}
{{- if lt (int $port) 1024 -}}
{{- $sysctls := $context.sysctls | default list -}}
{{- $sysctls = append $sysctls (dict "name" "net.ipv4.ip_unprivileged_port_start" "value" $port) -}}
{{- $_ := set $context "sysctls" $sysctls -}}
{{- end -}}
{{- toYaml $context -}}
{{- end -}}
{{/*
The webhook's HTTPS and health ports: webhook.port and healthPort, or on the node's network
(webhook.hostNetwork) hostNetworkPort and hostNetworkHealthPort, which the schema keeps at
1024 and above: a pod on the host network may not set the namespaced sysctl that lets a
non-root user bind below it (https://kubernetes.io/docs/tasks/administer-cluster/sysctl-cluster/).
*/}}
{{- define "troupe.webhookPort" -}}{{ ternary .Values.webhook.hostNetworkPort .Values.webhook.port (eq .Values.webhook.hostNetwork true) | int }}{{- end -}}
{{- define "troupe.webhookHealthPort" -}}{{ ternary .Values.webhook.hostNetworkHealthPort .Values.webhook.healthPort (eq .Values.webhook.hostNetwork true) | int }}{{- end -}}
{{/*
One component's container environment, (list $ "webhook" chartEnv): the chart's own EnvVars,
then extraEnv, then the component's extraEnv (core/v1 EnvVar objects, as given). A name
the chart sets may not be given again (the last of two entries would silently win).
*/}}
{{- define "troupe.env" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}{{- $env := index . 2 -}}
{{- $names := list -}}{{- range $env -}}{{- $names = append $names .name -}}{{- end -}}
{{- range $field, $extra := dict "extraEnv" ($root.Values.extraEnv | default list) (printf "%s.extraEnv" $component) ((index $root.Values $component).extraEnv | default list) -}}
{{- range $extra -}}
{{- if has .name $names -}}
{{- fail (printf "%s: %s is set by the chart (or given twice); it may not be given again" $field .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- $all := concat $env ($root.Values.extraEnv | default list) ((index $root.Values $component).extraEnv | default list) -}}
{{- if $all }}{{ toYaml $all }}{{ end -}}
{{- end -}}
{{- define "troupe.reconcilerServiceAccount" -}}{{ include "troupe.name" . }}-reconciler{{- end -}}
{{- define "troupe.webhookService" -}}{{ include "troupe.name" . }}-webhook{{- end -}}
{{- define "troupe.tlsSecret" -}}{{ .Values.webhook.tls.secretName | default (printf "%s-webhook-tls" (include "troupe.name" .)) }}{{- end -}}
{{- define "troupe.caSecret" -}}{{ include "troupe.name" . }}-webhook-ca{{- end -}}
{{/*
Where the serving certificate comes from: cert-manager, self-managed (the reconciler) or
manual (webhook.tls.secretName + caBundle). Fails on values that mix two of them.
*/}}
{{- define "troupe.certMode" -}}
{{- if .Values.certManager.enabled -}}
{{- if .Values.webhook.tls.caBundle -}}{{- fail "webhook.tls.caBundle: leave it empty with certManager.enabled (cert-manager's CA injector writes the caBundle)" -}}{{- end -}}
cert-manager
{{- else if .Values.webhook.tls.selfManaged -}}
{{- if .Values.webhook.tls.caBundle -}}{{- fail "webhook.tls.caBundle: set webhook.tls.selfManaged=false to provide your own certificate (self-managed certificates write the caBundle)" -}}{{- end -}}
{{- if .Values.webhook.tls.secretName -}}{{- fail "webhook.tls.secretName: set webhook.tls.selfManaged=false to provide your own Secret (self-managed certificates use <release>-webhook-tls)" -}}{{- end -}}
{{- $t := .Values.webhook.tls -}}
{{- if not (lt (int64 $t.renewBeforeSeconds) (int64 $t.validitySeconds)) -}}{{- fail (printf "webhook.tls.renewBeforeSeconds: must be less than validitySeconds (%v), got %v" $t.validitySeconds $t.renewBeforeSeconds) -}}{{- end -}}
{{- if not (lt (int64 $t.validitySeconds) (int64 $t.caValiditySeconds)) -}}{{- fail (printf "webhook.tls.caValiditySeconds: must be more than validitySeconds (%v), got %v" $t.validitySeconds $t.caValiditySeconds) -}}{{- end -}}
self-managed
{{- else -}}
manual
{{- end -}}
{{- end -}}
{{/* The DNS names the API server may check for the webhook's Service. */}}
{{- define "troupe.webhookDNSNames" -}}
{{- $svc := include "troupe.webhookService" . -}}
{{- toYaml (list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain)) -}}
{{- end -}}
{{- /* The Lease the reconciler's replicas elect a leader with, and the ConfigMap of rollback backoffs. */ -}}
{{- define "troupe.leaseName" -}}{{ include "troupe.name" . }}-reconciler{{- end -}}
{{- define "troupe.stateConfigMap" -}}{{ include "troupe.name" . }}-reconciler-state{{- end -}}
{{- /* The Secret of the key reservations are signed with: the user's, or the chart's own. */ -}}
{{- define "troupe.reservationKeySecret" -}}{{ .Values.reconciler.reservationKeySecret | default (printf "%s-reservation-key" (include "troupe.name" .)) }}{{- end -}}

{{- define "troupe.reconcilerUsername" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "troupe.reconcilerServiceAccount" . }}{{- end -}}

{{/*
The node labels of the topology levels per topology.preset, highest level first
(docs/guide/platforms.md): GKE's two label sets (the current one and the older one a node
may carry instead); EKS's network topology labels of the EC2 instance topology API
(https://docs.aws.amazon.com/eks/latest/userguide/node-labels.html); the NVLink domain that
NVIDIA's GPU feature discovery labels with nvidia.com/gpu.clique; the zone alone.
*/}}
{{- define "troupe.topologyPresets" -}}
gke:
  topologyLevels: [cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-subblock, cloud.google.com/gce-topology-host]
  topologyFallbackLevels: [topology.gke.io/cluster, topology.gke.io/rack, topology.gke.io/host]
eks:
  topologyLevels: [topology.k8s.aws/network-node-layer-1, topology.k8s.aws/network-node-layer-2, topology.k8s.aws/network-node-layer-3]
  topologyFallbackLevels: []
nvlink:
  topologyLevels: [nvidia.com/gpu.clique]
  topologyFallbackLevels: []
zone:
  topologyLevels: [topology.kubernetes.io/zone]
  topologyFallbackLevels: []
{{- end -}}

{{/*
Troupe's configuration file (config.yaml): .Values.config, its topology levels those of
topology.preset unless that is custom, plus reconcilerUsername, which is the reconciler's
ServiceAccount in this release. Checks the rules between keys that the
schema cannot express, with the same messages as troupe/config.py.
*/}}
{{- define "troupe.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $preset := (.Values.topology | default dict).preset | default "custom" -}}
{{- if ne $preset "custom" -}}
{{- $presets := include "troupe.topologyPresets" . | fromYaml -}}
{{- $gke := index $presets "gke" -}}
{{- if not (and (deepEqual $c.topologyLevels $gke.topologyLevels) (deepEqual $c.topologyFallbackLevels $gke.topologyFallbackLevels)) -}}
{{- fail (printf "config.topologyLevels: topology.preset=%s sets the levels; set topology.preset=custom to give your own, got %v and %v" $preset $c.topologyLevels $c.topologyFallbackLevels) -}}
{{- end -}}
{{- range $key, $levels := index $presets $preset -}}{{- $_ := set $c $key $levels -}}{{- end -}}
{{- end -}}
{{- if gt (int64 $c.gangScheduleDefaultTimeoutSeconds) (int64 $c.gangScheduleTimeoutSecondsLimit) -}}
{{- fail (printf "config.gangScheduleDefaultTimeoutSeconds: %v exceeds gangScheduleTimeoutSecondsLimit (%v)" $c.gangScheduleDefaultTimeoutSeconds $c.gangScheduleTimeoutSecondsLimit) -}}
{{- end -}}
{{- if and $c.topologyFallbackLevels (ne (len $c.topologyFallbackLevels) (len $c.topologyLevels)) -}}
{{- fail (printf "config.topologyFallbackLevels: must have as many levels as topologyLevels (%d) or be empty, got %v" (len $c.topologyLevels) $c.topologyFallbackLevels) -}}
{{- end -}}
{{- range $c.topologyFallbackLevels -}}
{{- if has . $c.topologyLevels -}}
{{- fail (printf "config.topologyFallbackLevels: must not repeat a key of topologyLevels, got %s" .) -}}
{{- end -}}
{{- end -}}
{{- $config := $c -}}
{{- $_ := set $config "reconcilerUsername" (include "troupe.reconcilerUsername" .) -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
CEL of the webhook's matchConditions. These mirror webhook/registration.py exactly
(tests/chart/test_chart.py compares the rendered object with webhook_configuration()).
*/}}
{{- define "troupe.celString" -}}'{{ . | replace "\\" "\\\\" | replace "'" "\\'" }}'{{- end -}}
{{- define "troupe.celHasAnnotations" -}}has({{ . }}.metadata) && has({{ . }}.metadata.annotations){{- end -}}
{{/* The pod in (list $ "object") carries a Troupe key: gang keys of the prefix, level requests, deviceshare.io/group. */}}
{{- define "troupe.celTroupeKeys" -}}
{{- $root := index . 0 -}}{{- $var := index . 1 -}}
{{- $prefix := $root.Values.config.gangAnnotationPrefix -}}
{{- $present := list -}}
{{- range (list (printf "%s-name" $prefix) (printf "%s-size" $prefix) (printf "%s-schedule-timeout-seconds" $prefix) (printf "%s-min-size" $prefix) "troupe.io/topology-required-level" "troupe.io/topology-preferred-level" "troupe.io/topology-slice-size" "troupe.io/topology-slice-required-level" "troupe.io/topology-placement" "troupe.io/topology-exclusive-level" "troupe.io/gang-failure-policy" "deviceshare.io/group") -}}
{{- $present = append $present (printf "%s in %s.metadata.annotations" (include "troupe.celString" .) $var) -}}
{{- end -}}
({{ include "troupe.celHasAnnotations" $var }} && ({{ join " || " $present }}))
{{- end -}}
{{/* The annotation key k is one only the reconciler may write. */}}
{{- define "troupe.celReservedKey" -}}
k.startsWith({{ include "troupe.celString" "reconciler.troupe.io/" }}) || k.startsWith({{ include "troupe.celString" "deviceshare.io/env." }}) || k == {{ include "troupe.celString" "deviceshare.io/selected-devices" }}
{{- end -}}
{{/* The pod "object"/"oldObject" carries an annotation only the reconciler may write. */}}
{{- define "troupe.celReservedKeys" -}}
({{ include "troupe.celHasAnnotations" . }} && {{ . }}.metadata.annotations.exists(k, {{ include "troupe.celReservedKey" . }}))
{{- end -}}
{{/* (list var other selected): an annotation of var whose key k satisfies selected is missing from other or differs there. */}}
{{- define "troupe.celNotKept" -}}
{{- $var := index . 0 -}}{{- $other := index . 1 -}}{{- $selected := index . 2 -}}
({{ include "troupe.celHasAnnotations" $var }} && {{ $var }}.metadata.annotations.exists(k, ({{ $selected }}) && !({{ include "troupe.celHasAnnotations" $other }} && k in {{ $other }}.metadata.annotations && {{ $other }}.metadata.annotations[k] == {{ $var }}.metadata.annotations[k])))
{{- end -}}
{{/* An UPDATE adds, changes or removes an annotation whose key k satisfies the predicate given. */}}
{{- define "troupe.celAnnotationsChanged" -}}
({{ include "troupe.celNotKept" (list "oldObject" "object" .) }} || {{ include "troupe.celNotKept" (list "object" "oldObject" .) }})
{{- end -}}
{{/* k is one of Troupe's keys (gang keys of the prefix, level requests, deviceshare.io/group). */}}
{{- define "troupe.celTroupeKey" -}}
{{- $prefix := .Values.config.gangAnnotationPrefix -}}
{{- $keys := list -}}
{{- range (list (printf "%s-name" $prefix) (printf "%s-size" $prefix) (printf "%s-schedule-timeout-seconds" $prefix) (printf "%s-min-size" $prefix) "troupe.io/topology-required-level" "troupe.io/topology-preferred-level" "troupe.io/topology-slice-size" "troupe.io/topology-slice-required-level" "troupe.io/topology-placement" "troupe.io/topology-exclusive-level" "troupe.io/gang-failure-policy" "deviceshare.io/group") -}}
{{- $keys = append $keys (include "troupe.celString" .) -}}
{{- end -}}
k in [{{ join ", " $keys }}]
{{- end -}}
{{/* The pod in "object" carries one of Kueue's topology annotations (troupe/kueue.py). */}}
{{- define "troupe.celKueueKeys" -}}
{{- $present := list -}}
{{- range (list "kueue.x-k8s.io/podset-required-topology" "kueue.x-k8s.io/podset-preferred-topology" "kueue.x-k8s.io/podset-unconstrained-topology" "kueue.x-k8s.io/podset-slice-required-topology" "kueue.x-k8s.io/podset-slice-size" "kueue.x-k8s.io/podset-slice-required-topology-constraints") -}}
{{- $present = append $present (printf "%s in %s.metadata.annotations" (include "troupe.celString" .) "object") -}}
{{- end -}}
({{ include "troupe.celHasAnnotations" "object" }} && ({{ join " || " $present }}))
{{- end -}}
{{- define "troupe.celGkeGate" -}}
(has({{ . }}.spec) && has({{ . }}.spec.schedulingGates) && {{ . }}.spec.schedulingGates.exists(g, has(g.name) && g.name.startsWith({{ include "troupe.celString" "gke.io/topology-aware-auto-" }})))
{{- end -}}
{{- define "troupe.celTroupeGate" -}}
(has({{ . }}.spec) && has({{ . }}.spec.schedulingGates) && {{ . }}.spec.schedulingGates.exists(g, has(g.name) && g.name == {{ include "troupe.celString" "troupe.io/placement" }}))
{{- end -}}
{{/* The pod in "object" names a pod group (troupe/podgroups.py): spec.schedulingGroup.podGroupName, Volcano's or KAI's annotation, coscheduling's label, not empty. */}}
{{- define "troupe.celPodGroup" -}}
{{- $annotations := list -}}
{{- range (include "troupe.registry.groupAnnotations" . | fromYamlArray) -}}
{{- $annotations = append $annotations (printf "(%s in object.metadata.annotations && object.metadata.annotations[%s] != '')" (include "troupe.celString" .) (include "troupe.celString" .)) -}}
{{- end -}}
{{- $labels := list -}}
{{- range (include "troupe.registry.groupLabels" . | fromYamlArray) -}}
{{- $labels = append $labels (printf "(%s in object.metadata.labels && object.metadata.labels[%s] != '')" (include "troupe.celString" .) (include "troupe.celString" .)) -}}
{{- end -}}
((has(object.spec) && has(object.spec.schedulingGroup) && has(object.spec.schedulingGroup.podGroupName) && object.spec.schedulingGroup.podGroupName != '') || ({{ include "troupe.celHasAnnotations" "object" }} && ({{ join " || " $annotations }})) || (has(object.metadata) && has(object.metadata.labels) && ({{ join " || " $labels }})))
{{- end -}}
{{/* The pod in "object" has a spec.schedulerName of config.adoptSchedulerNames (empty when the list is). */}}
{{- define "troupe.celAdoptedScheduler" -}}
{{- with .Values.config.adoptSchedulerNames -}}
{{- $names := list -}}
{{- range . -}}{{- $names = append $names (include "troupe.celString" .) -}}{{- end -}}
(has(object.spec) && has(object.spec.schedulerName) && object.spec.schedulerName in [{{ join ", " $names }}])
{{- end -}}
{{- end -}}
{{/* An UPDATE adds, changes or removes a pod group reference in metadata: Volcano's or KAI's annotation, coscheduling's label, the scheduler the pod was adopted from (troupe/adoption.py FIXED_WHILE_GATED). */}}
{{- define "troupe.celGroupReferenceChanged" -}}
{{- $keys := list -}}
{{- range (include "troupe.registry.groupReferenceKeys" . | fromYamlArray) -}}{{- $keys = append $keys (include "troupe.celString" .) -}}{{- end -}}
{{- $labels := list -}}
{{- range (include "troupe.registry.groupLabels" . | fromYamlArray) -}}
{{- $k := include "troupe.celString" . -}}
{{- $old := printf "(has(oldObject.metadata) && has(oldObject.metadata.labels) && %s in oldObject.metadata.labels)" $k -}}
{{- $new := printf "(has(object.metadata) && has(object.metadata.labels) && %s in object.metadata.labels)" $k -}}
{{- $labels = append $labels (printf "(%s ? !(%s && object.metadata.labels[%s] == oldObject.metadata.labels[%s]) : %s)" $old $new $k $k $new) -}}
{{- end -}}
({{ include "troupe.celAnnotationsChanged" (printf "k in [%s]" (join ", " $keys)) }} || {{ join " || " $labels }})
{{- end -}}
{{/* kube-scheduler will schedule the pod in "object": no spec.schedulerName, default-scheduler or an adopted one. */}}
{{- define "troupe.celKubeScheduler" -}}
{{- $names := list (include "troupe.celString" "default-scheduler") -}}
{{- range .Values.config.adoptSchedulerNames -}}{{- $names = append $names (include "troupe.celString" .) -}}{{- end -}}
(!has(object.spec) || !has(object.spec.schedulerName) || object.spec.schedulerName in [{{ join ", " $names }}])
{{- end -}}
{{- define "troupe.celTroupePods" -}}
{{- $group := printf "(%s && %s)" (include "troupe.celPodGroup" .) (include "troupe.celKubeScheduler" .) -}}
{{- $create := list (include "troupe.celTroupeKeys" (list . "object")) (include "troupe.celKueueKeys" .) (include "troupe.celGkeGate" "object") (include "troupe.celReservedKeys" "object") $group -}}
{{- with include "troupe.celAdoptedScheduler" . -}}{{- $create = append $create . -}}{{- end -}}
{{- $onCreate := join " || " $create -}}
{{- $gateRemoved := printf "(%s && !%s)" (include "troupe.celTroupeGate" "oldObject") (include "troupe.celTroupeGate" "object") -}}
{{- $groupChanged := printf "(%s && %s)" (include "troupe.celTroupeGate" "oldObject") (include "troupe.celGroupReferenceChanged" .) -}}
{{- $onUpdate := printf "oldObject != null && (%s || %s || %s || %s)" (include "troupe.celAnnotationsChanged" (include "troupe.celReservedKey" .)) (include "troupe.celAnnotationsChanged" (include "troupe.celTroupeKey" .)) $gateRemoved $groupChanged -}}
request.operation == 'CREATE' ? ({{ $onCreate }}) : ({{ $onUpdate }})
{{- end -}}
{{/* The namespace opt-in entry: a pod being created by a supported workload that names no gang or size itself (webhook/registration.py workload_pod_expression). */}}
{{- define "troupe.celWorkloadPods" -}}
{{- $prefix := .Values.config.gangAnnotationPrefix -}}
{{- $named := list -}}
{{- range (list (printf "%s-name" $prefix) (printf "%s-size" $prefix)) -}}
{{- $named = append $named (printf "%s in object.metadata.annotations" (include "troupe.celString" .)) -}}
{{- end -}}
request.operation == 'CREATE' && !({{ include "troupe.celHasAnnotations" "object" }} && ({{ join " || " $named }})) && ((has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller && ({{ include "troupe.registry.podOwners" . }}))) || {{ include "troupe.registry.memberLabels" . }})
{{- end -}}
{{- define "troupe.celNotReconcilerUpdate" -}}
request.operation != 'UPDATE' || request.userInfo.username != {{ include "troupe.celString" (include "troupe.reconcilerUsername" .) }}
{{- end -}}
{{- /*
The NetworkPolicyPeers the webhook port admits (decision 028), as a YAML list, empty for
every source: networkPolicy.apiServer, then an ipBlock per networkPolicy.apiServerCIDRs;
when both are empty and networkPolicy.apiServerFromEndpoints, the addresses of the
`kubernetes` EndpointSlice in `default` (the API server's own, looked up at install and
upgrade; the v1 Endpoints of that name when there is no slice, on clusters before
EndpointSlices; `helm template` has no cluster and finds none).
*/ -}}
{{- define "troupe.apiServerPeers" -}}
{{- $np := .Values.networkPolicy }}
{{- $peers := list }}
{{- range $np.apiServer }}{{ $peers = append $peers . }}{{ end }}
{{- range $np.apiServerCIDRs }}{{ $peers = append $peers (dict "ipBlock" (dict "cidr" .)) }}{{ end }}
{{- if and (not $peers) $np.apiServerFromEndpoints }}
{{- $addresses := list }}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" }}
{{- range (($slice | default dict).endpoints | default list) }}
{{- range (.addresses | default list) }}{{ $addresses = append $addresses . }}{{ end }}
{{- end }}
{{- if not $addresses }}
{{- $endpoints := lookup "v1" "Endpoints" "default" "kubernetes" }}
{{- range (($endpoints | default dict).subsets | default list) }}
{{- range (.addresses | default list) }}{{ $addresses = append $addresses .ip }}{{ end }}
{{- end }}
{{- end }}
{{- range $addresses }}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" (printf "%s/%s" . (ternary "128" "32" (contains ":" .))))) }}
{{- end }}
{{- end }}
{{- if $peers }}{{ toYaml $peers }}{{ end }}
{{- end -}}
