"""What bench/scale.py observes on a dev cluster: pods' bind and end times from one watch, partial gangs, and
the counters it reads from the apiserver and /proc.

Kept apart from the runners so that the short CI form (tests/integration/test_scale_short.py) checks the same
recorder the benchmark reports from: a gang is *partial* when some but not all of its pods are bound once its
first bind has had `settle` seconds (or when the run ends that way). No system may ever leave one.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.devcluster.cluster import ClusterState

JOB_NAME_LABEL = "job-name"
TERMINAL = ("Succeeded", "Failed")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------ pods
@dataclass
class PodTimes:
    """One pod as the watch saw it; times are `time.monotonic()` when the event arrived."""

    job: str
    name: str
    seen: float
    bound: float | None = None
    node: str = ""
    ended: float | None = None
    phase: str = ""
    deleted: bool = False

    @property
    def live(self) -> bool:
        return self.ended is None and not self.deleted


@dataclass
class Gang:
    """One Job's pods and what became of them. A Job may replace pods (a requeue kills them: they end
    Failed or are deleted), so every rule reads the pods alive at the moment, never all it ever had."""

    job: str
    size: int
    pods: dict[str, PodTimes] = field(default_factory=dict)  # by uid
    first_bound: float | None = None  # the first bind of any of its pods
    ran: float | None = None  # the first moment `size` of its live pods were bound: the gang runs
    done: float | None = None  # the moment `size` of its pods had Succeeded
    partial_since: float | None = None
    partial: str = ""  # why it was reported partial ("" = never)
    split: str = ""  # why it was reported in two domains at once ("" = never)

    def bound_live(self) -> list[PodTimes]:
        return [p for p in self.pods.values() if p.live and p.bound is not None]

    def succeeded(self) -> int:
        return sum(1 for p in self.pods.values() if p.phase == "Succeeded")

    def replaced(self) -> int:
        """Pods that had a node and then ended other than Succeeded, or were deleted before ending."""
        return sum(
            1 for p in self.pods.values() if p.bound is not None and not p.live and p.phase != "Succeeded"
        )

    def nodes(self) -> set[str]:
        """Where the pods that ran it were: the live bound ones, or those that Succeeded."""
        return {
            p.node for p in self.pods.values() if p.bound is not None and (p.live or p.phase == "Succeeded")
        }


class Recorder:
    """Turns pod events into per-gang times and checks every event for a partial gang (some, not all, of
    its live pods bound for longer than `settle`, or when the run ends; a gang whose pods have begun to
    Succeed is finishing, not partial) and for a gang whose live pods sit in two domains of `domain`.

    A gang is a Job's pods (the `job-name` label) unless `gang_of` says which gang a pod belongs to (a
    JobSet's pods, or an LWS group's: tests/integration/kinds.py)."""

    def __init__(
        self,
        sizes: dict[str, int],
        settle: float,
        domain: dict[str, str] | None = None,
        gang_of: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.gangs = {job: Gang(job, size) for job, size in sizes.items()}
        self.gang_of = gang_of
        self.settle = settle
        self.domain = domain or {}
        self.lock = threading.Lock()
        self.events = 0
        self.last_event = 0.0
        self.first_bind: float | None = None

    def on_pod(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        job = self.gang_of(pod) if self.gang_of else (meta.get("labels") or {}).get(JOB_NAME_LABEL, "")
        with self.lock:
            gang = self.gangs.get(job)
            if gang is None:
                return
            self.events += 1
            self.last_event = now
            uid = str(meta.get("uid") or meta.get("name"))
            times = gang.pods.get(uid)
            if times is None:
                times = gang.pods[uid] = PodTimes(job, str(meta.get("name")), now)
            node = (pod.get("spec") or {}).get("nodeName") or ""
            if node and times.bound is None:
                times.bound, times.node = now, str(node)
                if self.first_bind is None:
                    self.first_bind = now
                if gang.first_bound is None:
                    gang.first_bound = now
            times.phase = str((pod.get("status") or {}).get("phase") or "")
            if times.phase in TERMINAL and times.ended is None:
                times.ended = now
            if kind == "DELETED":
                times.deleted = True
            bound = gang.bound_live()
            if gang.ran is None and len(bound) >= gang.size:
                gang.ran = now
            if gang.done is None and gang.succeeded() >= gang.size:
                gang.done = now
            if self.domain and not gang.split:
                domains = sorted({self.domain.get(p.node, "?") for p in bound})
                if len(domains) > 1:
                    gang.split = f"{gang.job}: live pods bound in {len(domains)} domains at once: {domains}"
            self._check(gang, now, final=False)

    def _check(self, gang: Gang, now: float, final: bool) -> None:
        if gang.partial or gang.succeeded():
            return
        bound = len(gang.bound_live())
        if not 0 < bound < gang.size:
            gang.partial_since = None
            return
        if gang.partial_since is None:
            gang.partial_since = now
        if final or now - gang.partial_since > self.settle:
            when = "when the run ended" if final else f"for {now - gang.partial_since:.1f} s"
            gang.partial = f"{gang.job}: {bound} of {gang.size} live pods bound {when}"

    def check_all(self, now: float, final: bool = False) -> None:
        """The periodic (and the final) pass over every gang, for gangs no event touched lately."""
        with self.lock:
            for gang in self.gangs.values():
                self._check(gang, now, final)

    def counts(self) -> tuple[int, int]:
        """(gangs that ran, gangs done) so far."""
        with self.lock:
            ran = sum(1 for g in self.gangs.values() if g.ran is not None)
            done = sum(1 for g in self.gangs.values() if g.done is not None)
            return ran, done

    def partial_gangs(self) -> list[str]:
        with self.lock:
            return [g.partial for g in self.gangs.values() if g.partial]

    def split_gangs(self) -> list[str]:
        with self.lock:
            return [g.split for g in self.gangs.values() if g.split]


class PodWatch:
    """List, then watch, one namespace's pods (or the objects of another `collection`: `apis/batch/v1/jobs`)
    over a raw HTTPS stream; resumes after a cut or 410 Gone."""

    def __init__(
        self,
        state: ClusterState,
        namespace: str,
        handle: Callable[[str, dict[str, Any], float], None],
        collection: str = "api/v1/pods",
    ) -> None:
        self.state = state
        prefix, _, plural = collection.rpartition("/")
        self.path = f"/{prefix}/namespaces/{namespace}/{plural}"
        self.handle = handle
        self.context = ssl.create_default_context(cafile=str(state.ca_file))
        self.stopping = threading.Event()
        self.conn: http.client.HTTPSConnection | None = None
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self.requests = 0  # what this watch asked of the apiserver (lists and watches)
        self.restarts = 0
        self.errors: list[str] = []  # why the stream was resumed (it resumes from the last version seen)
        self.version = ""

    def _get(self, query: str) -> http.client.HTTPResponse:
        if self.conn is not None:
            self.conn.close()
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.state.api_port, context=self.context, timeout=600
        )
        self.conn = conn
        self.requests += 1
        conn.request("GET", f"{self.path}?{query}", headers={"Authorization": f"Bearer {self.state.token}"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"pod watch: HTTP {response.status}: {response.read()[:300]!r}")
        return response

    def _list(self) -> str:
        body = json.loads(self._get("").read())  # a consistent list: its version starts the watch
        now = time.monotonic()
        for item in body.get("items") or []:
            self.handle("ADDED", item, now)
        return str(body["metadata"]["resourceVersion"])

    def start(self) -> None:
        self.version = self._list()
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                response = self._get(
                    f"watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={self.version}"
                )
                while not self.stopping.is_set():
                    line = response.readline()
                    if not line:
                        if not self.stopping.is_set():
                            self.errors.append("stream ended")
                        break
                    event = json.loads(line)
                    now = time.monotonic()
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        self.errors.append(
                            f"watch error event: {obj.get('code')} {obj.get('message', '')}"[:200]
                        )
                        if obj.get("code") == 410:  # too old: list again, then go on
                            self.version = self._list()
                        break
                    self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
                    if kind != "BOOKMARK":
                        self.handle(str(kind), obj, now)
            # ValueError: json's JSONDecodeError, and UnicodeDecodeError on a line cut mid-character (seen
            # once, which killed the thread): a cut like the others, resumed from the last version seen.
            except (OSError, http.client.HTTPException, ValueError, RuntimeError) as e:
                if self.stopping.is_set():
                    return
                self.errors.append(f"{type(e).__name__}: {e}"[:200])
                time.sleep(0.5)
            if not self.stopping.is_set():
                self.restarts += 1

    def stop(self) -> None:
        self.stopping.set()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)


# ---------------------------------------------------------------------------------------------------- /proc
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime, all threads


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (the peak since the process started), MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


# ------------------------------------------------------------------------------------------- apiserver
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def prometheus_samples(text: str, names: Iterable[str]) -> list[tuple[str, dict[str, str], float]]:
    wanted = set(names)
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in wanted:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        out.append((match.group(1), labels, float(match.group(3))))
    return out


@dataclass
class ApiCounters:
    """One read of the apiserver's /metrics: requests (leases apart) and admission-webhook latency buckets."""

    requests: float
    leases: float
    webhook_buckets: dict[str, dict[float, float]]  # webhook name -> upper bound -> cumulative count

    @classmethod
    def parse(cls, text: str) -> ApiCounters:
        requests = leases = 0.0
        buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        names = ("apiserver_request_total", "apiserver_admission_webhook_admission_duration_seconds_bucket")
        for name, labels, value in prometheus_samples(text, names):
            if name == "apiserver_request_total":
                if labels.get("resource") == "leases":
                    leases += value
                else:
                    requests += value
            else:
                buckets[labels.get("name", "?")][float(labels["le"])] += value
        return cls(requests, leases, {k: dict(v) for k, v in buckets.items()})


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """histogram_quantile over cumulative buckets (linear inside a bucket, as Prometheus does)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            inside = count - lower_count
            fraction = (rank - lower_count) / inside if inside > 0 else 1.0
            return lower_bound + (bound - lower_bound) * fraction
        lower_bound, lower_count = bound, count
    return bounds[-1]


REVIEW_HISTOGRAM = "phalanx_webhook_review_duration_seconds_bucket"


LAG_HISTOGRAM = "phalanx_event_loop_lag_seconds_bucket"


def review_buckets(text: str) -> dict[str, dict[float, float]]:
    """The operator's own review-time histogram (metrics.WEBHOOK_REVIEW), by webhook: upper bound ->
    cumulative count, in the shape of ApiCounters.webhook_buckets."""
    return own_buckets(text, REVIEW_HISTOGRAM, "webhook")


def lag_buckets(text: str) -> dict[str, dict[float, float]]:
    """The operator's event-loop lag histogram (metrics.EVENT_LOOP_LAG) under the one key "loop"."""
    return own_buckets(text, LAG_HISTOGRAM, None)


def own_buckets(text: str, histogram: str, by: str | None) -> dict[str, dict[float, float]]:
    """One histogram of the operator's /metrics, by the value of its label `by` (None: all under "loop"):
    upper bound -> cumulative count."""
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for _, labels, value in prometheus_samples(text, (histogram,)):
        buckets[labels.get(by, "?") if by else "loop"][float(labels["le"])] += value
    return {k: dict(v) for k, v in buckets.items()}


# The operator's own pass timing (Phalanx only): how many passes ran and the seconds they took, planning
# alone and planning with applying.
PASS_SERIES = {
    "passes": "phalanx_scheduling_pass_duration_seconds_count",
    "pass_s": "phalanx_scheduling_pass_duration_seconds_sum",
    "plan_s": "phalanx_plan_duration_seconds_sum",
}


WRITES_COUNTER = "phalanx_writes_total"


def write_counts(text: str) -> dict[str, float]:
    """The operator's writes counter, one read: `<action> <why>` (or `<action>`) -> count."""
    return {
        f"{labels.get('action', '')} {labels.get('why', '')}".strip(): value
        for _, labels, value in prometheus_samples(text, [WRITES_COUNTER])
    }


def count_diff(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What a counter read twice grew by, series that did not grow left out."""
    grown = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in sorted(grown.items()) if v > 0}


def pass_totals(text: str) -> dict[str, float]:
    """The operator's pass counters, one read: passes, and seconds in passes and in planning."""
    samples = {name: value for name, _, value in prometheus_samples(text, PASS_SERIES.values())}
    return {key: samples[name] for key, name in PASS_SERIES.items() if name in samples}


def webhook_latency(before: ApiCounters, after: ApiCounters) -> dict[str, dict[str, float | None]]:
    """Per webhook, as the apiserver timed it: reviews in the window and their p50/p99 in ms."""
    return histogram_latency(before.webhook_buckets, after.webhook_buckets)


def histogram_latency(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, dict[str, float | None]]:
    """Per series of a histogram read twice: observations in the window and their p50/p99 in ms (bucket
    resolution)."""
    out: dict[str, dict[str, float | None]] = {}
    for name, buckets in after.items():
        old = before.get(name, {})
        diff = {le: count - old.get(le, 0.0) for le, count in buckets.items()}
        reviews = diff.get(float("inf"), 0.0)
        if reviews <= 0:
            continue
        p50, p99 = quantile(diff, 0.5), quantile(diff, 0.99)
        out[name] = {
            "reviews": reviews,
            "p50_ms": None if p50 is None else p50 * 1000,
            "p99_ms": None if p99 is None else p99 * 1000,
        }
    return out


HTTP_LINE = re.compile(r'"HTTP" verb="(\w+)" URI="([^"]*)" latency="([^"]*)" userAgent="([^"]*)"')


def resource_of(uri: str) -> str:
    """The resource a request URI names, with its subresource: `/api/v1/namespaces/a/pods/p/status?x` ->
    `pods/status`, `/apis/phalanx.dev/v1alpha1/namespaces/a/podgroups` -> `podgroups`."""
    parts = [p for p in uri.split("?", 1)[0].split("/") if p]
    # /api/<version>/... or /apis/<group>/<version>/...: the rest is [namespaces, <ns>,] plural[, name[, sub]]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    if not rest:
        return "/".join(parts) or "/"
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"


def agent_of(user_agent: str) -> str:
    """The component a user agent names: `kube-scheduler/v1.37.2 (linux/amd64) ...` -> kube-scheduler."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0] or "(none)"


_DURATION = re.compile(r"([0-9.]+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def go_duration(text: str) -> float:
    """A Go duration string (`1.5ms`, `856.448µs`, `1m2.5s`) in seconds."""
    return sum(float(number) * _UNIT[unit] for number, unit in _DURATION.findall(text))


def log_chunk(log: Path, start: int = 0, end: int | None = None) -> str:
    """The text of a log between two byte offsets (to its end when `end` is None)."""
    with open(log, "rb") as f:
        f.seek(start)
        return f.read(-1 if end is None else max(0, end - start)).decode(errors="replace")


@dataclass
class RequestLog:
    """Requests the apiserver logged (at -v=3, one "HTTP" line each, written when the request ends) between
    two offsets of its log: counts by component (user agent) and verb, leases apart as verb `LEASE`, and
    the latency of each component's writes."""

    counts: dict[str, dict[str, int]]
    write_latency: dict[str, list[float]]
    # per component, its writes by verb and resource (`PATCH pods`, `POST events`): what each write was for
    writes: dict[str, dict[str, int]]
    # per resource, how long each create (POST) took, whoever sent it: a Job's create includes every
    # admission webhook the apiserver called for it, so systems with one, two or no webhooks compare on
    # what a user waits for
    creates: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def read(cls, log: Path, start: int, end: int) -> RequestLog:
        return cls.parse(log_chunk(log, start, end))

    @classmethod
    def parse(cls, chunk: str) -> RequestLog:
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        latency: dict[str, list[float]] = defaultdict(list)
        writes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        creates: dict[str, list[float]] = defaultdict(list)
        for line in chunk.splitlines():
            match = HTTP_LINE.search(line)
            if match is None:
                continue
            verb, uri, took, user_agent = match.groups()
            agent = agent_of(user_agent)
            lease = "/leases/" in uri or uri.endswith("/leases")
            counts[agent]["LEASE" if lease else verb] += 1
            if verb in WRITES and not lease:
                latency[agent].append(go_duration(took))
                writes[agent][f"{verb} {resource_of(uri)}"] += 1
            if verb == "POST":
                creates[resource_of(uri)].append(go_duration(took))
        return cls(
            {a: dict(v) for a, v in counts.items()},
            dict(latency),
            {a: dict(v) for a, v in writes.items()},
            dict(creates),
        )
