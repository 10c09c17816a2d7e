"""The label, annotation and scheduling-gate names Phalanx reads and writes."""

from __future__ import annotations

PREFIX = "phalanx.dev"

# On a Job: opt in (label) and choose the policy (annotations).
MANAGED_LABEL = f"{PREFIX}/managed"
MANAGED_VALUE = "true"
UNMANAGED_VALUE = "false"  # an explicit opt-out; any other value is refused (a typo would opt out silently)
POLICY_ANNOTATION = f"{PREFIX}/policy"
MIN_COUNT_ANNOTATION = f"{PREFIX}/min-count"
TOPOLOGY_KEY_ANNOTATION = f"{PREFIX}/topology-key"
DISRUPTION_MODE_ANNOTATION = f"{PREFIX}/disruption-mode"
PREEMPTION_POLICY_ANNOTATION = f"{PREFIX}/preemption-policy"
POLICY_ANNOTATIONS = (
    POLICY_ANNOTATION,
    MIN_COUNT_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
    DISRUPTION_MODE_ANNOTATION,
    PREEMPTION_POLICY_ANNOTATION,
)

# On a Job: topology mode and slices (api/job_layout.py).
TOPOLOGY_MODE_ANNOTATION = f"{PREFIX}/topology-mode"
SLICE_SIZE_ANNOTATION = f"{PREFIX}/slice-size"
SLICE_TOPOLOGY_KEY_ANNOTATION = f"{PREFIX}/slice-topology-key"
LAYOUT_ANNOTATIONS = (TOPOLOGY_MODE_ANNOTATION, SLICE_SIZE_ANNOTATION, SLICE_TOPOLOGY_KEY_ANNOTATION)

# On a Job: what a scale-up of its running gang does when the new pods do not fit beside the running ones
# (`wait`, the default: they wait there; `requeue`: the whole gang is requeued and placed again whole at its
# new size). Editable while the Job runs.
ON_SCALE_UP_ANNOTATION = f"{PREFIX}/on-scale-up"

# On a Job that Phalanx suspended to requeue it whole (preempted, or its domain failed): why. Phalanx resumes
# the Job once its pods are gone and removes the annotation; its new pods wait for a whole placement.
REQUEUED_ANNOTATION = f"{PREFIX}/requeued"

# Every phalanx.dev/ key a Job may carry: any other is refused at creation with a did-you-mean, so a
# misspelt key is not silently ignored. A new Job key is known once it is listed here.
JOB_ANNOTATIONS = (*POLICY_ANNOTATIONS, *LAYOUT_ANNOTATIONS, ON_SCALE_UP_ANNOTATION, REQUEUED_ANNOTATION)
JOB_LABELS = (MANAGED_LABEL,)
WRITTEN_BY_PHALANX = (REQUEUED_ANNOTATION,)  # refused when a user sets it at creation

# On pods: held back by this scheduling gate until their group is admitted.
ADMISSION_GATE = f"{PREFIX}/admission"
POD_GROUP_LABEL = f"{PREFIX}/pod-group"

# On the Workloads and PodGroups Phalanx creates for a Job.
JOB_NAME_LABEL = f"{PREFIX}/job-name"
JOB_UID_LABEL = f"{PREFIX}/job-uid"
MANAGED_BY_ANNOTATION = f"{PREFIX}/managed-by"
MANAGED_BY_VALUE = "phalanx"
# Whose gang the object is, as kubectl describe writes a controller ("Job/train"): the OWNER column of
# `kubectl get podgroups`, and what `phalanx explain` takes (explain Job/train).
OWNER_ANNOTATION = f"{PREFIX}/owner"
