"""The operator's Prometheus metrics, in one registry of their own (served on /metrics).

Names follow Prometheus conventions (`_total` counters, `_seconds` histograms) and Kueue's
vocabulary where one exists (admission, pending workloads).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

GROUPS_WAITING = Gauge(
    "phalanx_pod_groups_waiting",
    "PodGroups whose pods are held behind the admission gate, by the reason they wait",
    ["reason"],
    registry=REGISTRY,
)
ADMISSIONS = Counter(
    "phalanx_admissions_total",
    "Placement decisions recorded and released, by policy (Gang or Basic)",
    ["policy"],
    registry=REGISTRY,
)
PODS_RELEASED = Counter(
    "phalanx_pods_released_total",
    "Pods pinned to a node and released from the admission gate",
    registry=REGISTRY,
)
PASS_DURATION = Histogram(
    "phalanx_scheduling_pass_duration_seconds",
    "Time of one scheduling pass: plan and apply",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
PLAN_DURATION = Histogram(
    "phalanx_plan_duration_seconds",
    "Time to plan one pass (snapshot and every placement decision), without any API call",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY,
)
DECISION_DURATION = Histogram(
    "phalanx_placement_decision_duration_seconds",
    "Time of one placement decision (one group, one snapshot)",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
    registry=REGISTRY,
)
ADMISSION_LATENCY = Histogram(
    "phalanx_job_admission_latency_seconds",
    "From a managed Job's creation to its first admission",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
    registry=REGISTRY,
)
API_ERRORS = Counter(
    "phalanx_api_errors_total",
    "Failed Kubernetes API requests, by verb and HTTP code (0: no answer)",
    ["verb", "code"],
    registry=REGISTRY,
)
APPLY_FAILURES = Counter(
    "phalanx_apply_failures_total",
    "Planned actions that failed and left their group to back off, by action",
    ["action"],
    registry=REGISTRY,
)
GROUPS_BACKING_OFF = Gauge(
    "phalanx_pod_groups_backing_off",
    "Groups whose last actions failed and that wait before the next try",
    registry=REGISTRY,
)
LEADER = Gauge(
    "phalanx_leader",
    "1 while this replica holds the leader Lease and runs the scheduling loop",
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "phalanx_preemptions_total",
    "Preemptions made for a pending group, by how its victims go: whole (requeued) or partial (evicted pods)",
    ["mode"],
    registry=REGISTRY,
)
PREEMPTED_PODS = Counter(
    "phalanx_preempted_pods_total",
    "Pods preempted to make room for higher-priority groups",
    registry=REGISTRY,
)
RELEASES_ROLLED_BACK = Counter(
    "phalanx_releases_rolled_back_total",
    "Groups whose released pods kube-scheduler could not bind, requeued to be placed again",
    registry=REGISTRY,
)
REQUEUES = Counter(
    "phalanx_requeues_total",
    "Jobs suspended by Phalanx to be placed again as a whole, by reason",
    ["reason"],
    registry=REGISTRY,
)
LONGEST_WAIT = Gauge(
    "phalanx_longest_wait_seconds",
    "How long the gang that has waited longest for its admission has waited (0: none waits); past "
    "--starvation-age the room it needs is held for it",
    registry=REGISTRY,
)
