"""The operator's Prometheus metrics, in one registry of their own (served on /metrics).

Names follow Prometheus conventions (`_total` counters, `_seconds` histograms) and Kueue's
vocabulary where one exists (admission, pending workloads, admission wait time); the leader gauge
also under client-go's name, so dashboards made for other controllers read it. The registry also
carries prometheus-client's process, platform and garbage-collector collectors (`process_*`,
`python_info`, `python_gc_*`), as the default registry would.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)


def phalanx_version() -> str:
    """The installed package's version (pyproject.toml's)."""
    try:
        return installed_version("phalanx")
    except PackageNotFoundError:
        return "unknown"


BUILD = Info("phalanx_build", "The running Phalanx: its version", registry=REGISTRY)
BUILD.info({"version": phalanx_version()})

GROUPS_WAITING = Gauge(
    "phalanx_pod_groups_waiting",
    "PodGroups whose pods are held behind the admission gate, by the reason they wait",
    ["reason"],
    registry=REGISTRY,
)
ADMISSIONS = Counter(
    "phalanx_admissions_total",
    "Units admitted (a gang's decision recorded and its pods released, or a basic group's pods ungated), "
    "each time it goes from waiting to admitted: at first, and again after a requeue; by policy",
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
UNITS_MADE = Counter(
    "phalanx_units_made_total",
    "Units made from the cache for a pass: those of owners whose records changed (loop/incremental.py)",
    registry=REGISTRY,
)
UNITS_SKIPPED = Counter(
    "phalanx_units_skipped_total",
    "Settled units a pass did not plan again: nothing they read changed since they planned nothing",
    registry=REGISTRY,
)
PLAN_ERRORS = Counter(
    "phalanx_plan_errors_total",
    "Units whose planning raised an error in a pass (a bug): each planned nothing, the others went on; "
    "the operator's log says which and why",
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
WRITES = Counter(
    "phalanx_writes_total",
    "API writes the applier made for the passes' actions, by action (ReleasePod, PatchStatus, PostEvent, "
    "...) and why: a status write's phase, an event's reason (empty for the rest); failed ones included. "
    "What Phalanx's own share of the apiserver's requests goes to (docs/performance.md)",
    ["action", "why"],
    registry=REGISTRY,
)
GROUPS_BACKING_OFF = Gauge(
    "phalanx_pod_groups_backing_off",
    "Groups whose last actions failed and that wait before the next try",
    registry=REGISTRY,
)
ADMISSION_WAIT = Histogram(
    "phalanx_admission_wait_time_seconds",
    "From a unit's creation, or its last requeue, until it was admitted, by policy "
    "(Kueue's admission_wait_time_seconds)",
    ["policy"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 10800.0),
    registry=REGISTRY,
)
LEADER = Gauge(
    "phalanx_leader",
    "1 while this replica runs the scheduling loop (it holds the leader Lease, or leader election is off)",
    registry=REGISTRY,
)
LEADER_ELECTION_MASTER = Gauge(
    "leader_election_master_status",
    "client-go's gauge: 1 while this replica is the master of the lease `name` (with leader election off, "
    "1 while it runs the scheduling loop), 0 while it stands by",
    ["name"],
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

# The informers (watch/informer.py): rare events only, nothing per watch event.
WATCH_LISTS = Counter(
    "phalanx_watch_lists_total",
    "LISTs of a kind the informer made: its priming, and a new list after 410 Gone",
    ["kind"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "phalanx_watch_restarts_total",
    "Watches of a kind the informer started again: `ended` (its timeout, a cut connection: resumed from "
    "the last resourceVersion), `failed` (after a backoff), `gone` (410: listed again)",
    ["kind", "reason"],
    registry=REGISTRY,
)
WATCH_DROPPED = Counter(
    "phalanx_watch_dropped_total",
    "Records dropped after a new list lacked them: objects deleted while the watch was away",
    ["kind"],
    registry=REGISTRY,
)
CACHE_OBJECTS = Gauge(
    "phalanx_cache_objects",
    "Records the cache holds, by kind (Node, Pod), read when scraped",
    ["kind"],
    registry=REGISTRY,
)

EVENT_LOOP_LAG = Histogram(
    "phalanx_event_loop_lag_seconds",
    "How much later than asked the event loop woke a timer (process/looplag.py): the wait of anything that "
    "becomes ready in this process (an admission review, a watch event, a pass) behind the loop's other work",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)

WEBHOOK_REVIEW = Histogram(
    "phalanx_webhook_review_duration_seconds",
    "Time this process took for one admission review, from its parsed request to its response (Kopf's "
    "admission machinery and the handler), by webhook; the apiserver's own histogram adds the network and "
    "TLS, in coarser buckets",
    ["webhook"],
    # Finer from 2.5 to 25 ms, where a loaded process's tail lies: a p99 read from the histogram falls on a
    # bucket's edge, and 5 -> 10 ms alone could not tell 6 ms from 10 ms.
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY,
)


def set_leading(lease: str, leading: bool) -> None:
    """This replica started (True) or stopped (False) running the scheduling loop: both leader gauges."""
    LEADER.set(1 if leading else 0)
    LEADER_ELECTION_MASTER.labels(lease).set(1 if leading else 0)
