"""The first seconds of a burst, from the apiserver's request log: when each step of the chain first happened.

A burst's first pod bound is a chain of requests by different components: the bench's Job creates, the
job controller's pod creates, the admitter's writes (Phalanx: its Workload and PodGroup creates, the
PodGroup's recorded admission, the pod patches that release them), and kube-scheduler's bindings. The
apiserver logs each request when it ends (at -v=3, which `bench/scale.py` sets for the measured window),
with its latency, so each request's start and end are known to the microsecond. This prints, for every
(component, verb, resource), when its 1st and its Nth request (default 8: a gang's pods) started and
ended, relative to the first Job create, in the order they first started: where a slow first pod's time
went.

    python bench/timeline.py <workdir>/.../logs/kube-apiserver.log [--start OFFSET --end OFFSET] [--nth 8]
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from scale_watch import HTTP_LINE, agent_of, go_duration, log_chunk, resource_of

# klog's prefix: I1203 13:45:01.123456 (month, day, time; the year is not logged)
_KLOG_TIME = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})")


@dataclass(frozen=True)
class Request:
    start: float  # seconds, on the log's clock (of the day)
    end: float
    agent: str
    verb: str
    resource: str


def read(log: Path, start: int = 0, end: int | None = None) -> list[Request]:
    return parse(log_chunk(log, start, end))


def parse(chunk: str) -> list[Request]:
    """The requests of a stretch of the apiserver's log (leases and watches left out), by start."""
    out = []
    for line in chunk.splitlines():
        when, match = _KLOG_TIME.match(line), HTTP_LINE.search(line)
        if when is None or match is None:
            continue
        _, _, hh, mm, ss, us = (int(x) for x in when.groups())
        ended = hh * 3600 + mm * 60 + ss + us / 1e6
        verb, uri, took, user_agent = match.groups()
        if "/leases/" in uri or "watch=true" in uri:
            continue  # node heartbeats; a watch is logged when it ends
        out.append(Request(ended - go_duration(took), ended, agent_of(user_agent), verb, resource_of(uri)))
    return sorted(out, key=lambda r: r.start)


@dataclass(frozen=True)
class Step:
    agent: str
    verb: str
    resource: str
    count: int
    first: Request
    nth: Request | None


def steps(requests: list[Request], nth: int = 8) -> tuple[float, list[Step]]:
    """The time of the first Job create (0 of the timeline) and each (agent, verb, resource)'s 1st and
    Nth request, in the order of their first start. No Job create: the first request is 0."""
    jobs = [r for r in requests if r.verb == "POST" and r.resource == "jobs"]
    zero = jobs[0].start if jobs else requests[0].start if requests else 0.0
    seen: dict[tuple[str, str, str], list[Request]] = defaultdict(list)
    for r in requests:
        seen[(r.agent, r.verb, r.resource)].append(r)
    out = [
        Step(agent, verb, resource, len(rs), rs[0], rs[nth - 1] if len(rs) >= nth else None)
        for (agent, verb, resource), rs in seen.items()
    ]
    return zero, sorted(out, key=lambda s: s.first.start)


def first_binding(requests: list[Request]) -> float | None:
    """Seconds from the first Job create's start to the end of the first binding (kube-scheduler's
    `POST pods/binding`, which sets a pod's nodeName), both on the apiserver's clock: the first pod bound,
    without the delay of anyone's watch. None without a Job create or a binding."""
    jobs = [r.start for r in requests if r.verb == "POST" and r.resource == "jobs"]
    bound = [r.end for r in requests if r.verb == "POST" and r.resource == "pods/binding"]
    if not jobs or not bound:
        return None
    return min(bound) - min(jobs)


def render(zero: float, rows: list[Step], nth: int) -> str:
    def at(r: Request | None) -> str:
        return "" if r is None else f"{r.start - zero:7.3f} → {r.end - zero:7.3f}"

    width = max((len(f"{s.agent} {s.verb} {s.resource}") for s in rows), default=10)
    lines = [f"{'component verb resource':<{width}}  {'count':>6}  {'1st start → end (s)':>19}  {nth}th"]
    for s in rows:
        name = f"{s.agent} {s.verb} {s.resource}"
        lines.append(f"{name:<{width}}  {s.count:>6}  {at(s.first):>19}  {at(s.nth)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--start", type=int, default=0, help="byte offset to read from")
    parser.add_argument("--end", type=int, default=None, help="byte offset to read to")
    parser.add_argument("--nth", type=int, default=8)
    parser.add_argument("--within", type=float, default=10.0, help="seconds after the first Job create")
    args = parser.parse_args(argv)
    requests = read(args.log, args.start, args.end)
    zero, rows = steps(requests, args.nth)
    rows = [s for s in rows if s.first.start - zero <= args.within]
    print(f"{args.log} (0 = the first Job create, {dt.timedelta(seconds=round(zero))} on the log's clock)")
    print(render(zero, rows, args.nth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
