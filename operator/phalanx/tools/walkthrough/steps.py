"""The article's experiments as walk-through steps, in its order, each with what to notice.

Each step sets up the article's cluster state, submits its Jobs in the Phalanx form (label + annotations
on a stock cluster), waits for what Phalanx must do, prints the `where` table and `kubectl get podgroups`
(`Demo.show`), and says what the article saw upstream and what Phalanx does. The runner cleans up after
each step (Jobs, fillers, failed nodes), so every step starts on 8 free nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY
from phalanx.tools.walkthrough.demo import Demo, StepError
from phalanx.tools.walkthrough.facts import GPU, PAUSE_IMAGE, bound, condition, gated, job_manifest, phases
from phalanx.tools.walkthrough.kind_steps import KIND_STEPS
from phalanx.tools.walkthrough.kueue_step import kueue
from phalanx.tools.walkthrough.runner import Step

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
PRIORITY_CLASSES = {"low": 100, "high": 1000}
"""The article's classes (cluster-scoped: created if absent, never deleted)."""
BEST_FIT_RUNS = 3
REQUEUE_TIMEOUT = 150.0
"""The node-failure requeue comes after phalanx run's --node-failure-grace (30 s by default)."""


def names(pods: list[Mapping[str, Any]]) -> set[str]:
    return {str(p["metadata"]["name"]) for p in pods}


def one(values: set[str]) -> str:
    return ", ".join(sorted(values))


# ---------------------------------------------------------------------- gang


def plain_4(d: Demo) -> None:
    d.fill(*FIVE_BUSY)
    d.create_job(job_manifest("plain-4", 4, policy="basic"))

    def three_run_one_refused() -> Mapping[str, Any] | None:
        pods = d.job_pods("plain-4")
        refused = [
            p
            for p in pods
            if (c := condition({"status": p.get("status") or {}}, "PodScheduled"))
            and c.get("reason") == "Unschedulable"
        ]
        return refused[0] if phases(pods) == {"Running": 3, "Pending": 1} and refused else None

    pending = d.wait(
        "3 plain-4 pods Running, the 4th Pending (kube-scheduler: Unschedulable)", three_run_one_refused
    )
    d.hold("3 Running, 1 Pending", lambda: phases(d.job_pods("plain-4")) == {"Running": 3, "Pending": 1})
    d.check(
        not gated(d.job_pods("plain-4"))
        and "basic" in ((d.group_of("plain-4") or {}).get("spec") or {}).get("schedulingPolicy", {}),
        "a Basic PodGroup is recorded and no plain-4 pod is gated",
    )
    d.show("plain-4, 5 nodes busy")
    message = condition({"status": pending["status"]}, "PodScheduled") or {}
    d.say(f"{pending['metadata']['name']}: {message.get('message')}")
    d.notice(
        "as upstream: without a gang, 3 pods start and hold 3 nodes doing nothing while the 4th waits. "
        "Phalanx records a Basic PodGroup and never holds these pods back."
    )


def gang_4(d: Demo) -> None:
    d.fill(*FIVE_BUSY)
    d.create_job(job_manifest("gang-4", 4))
    cond = d.wait_waiting("gang-4", 4)
    d.show("gang-4 with 3 free nodes")
    admitted = condition(d.group_of("gang-4"), "Admitted") or {}
    d.say(f"PodGroupInitiallyScheduled={cond['status']} {cond['reason']}: {cond['message']}")
    d.say(f"Admitted={admitted.get('status')} {admitted.get('reason')}: {admitted.get('message')}")
    d.unfill("was-worker")
    pods = d.wait_bound("gang-4", 4)
    times = sorted(
        c["lastTransitionTime"]
        for p in pods
        for c in p["status"].get("conditions") or []
        if c["type"] == "PodScheduled" and c["status"] == "True"
    )
    d.check(len(times) == 4, "all 4 gang-4 pods PodScheduled=True", times)
    d.show("gang-4 after freeing was-worker")
    same = "the same second" if times[0] == times[-1] else f"{times[0]} .. {times[-1]}"
    d.say(f"the 4 pods got PodScheduled=True in {same} ({times[-1]})")
    d.notice(
        "as upstream's gang (minCount 4): no pod bound while only 3 fit, all 4 bound together once a 4th "
        "node was free. Phalanx does it on a stock cluster with no feature gate, and its Admitted condition "
        "adds, after upstream's sentence, what blocks each domain (in kube-scheduler's words)."
    )


# ---------------------------------------------------------------------- topology


def local_2(d: Demo) -> None:
    d.create_job(job_manifest("local-2", 2, key=LOCAL_BLOCK_KEY))
    pods = d.wait_bound("local-2", 2, LOCAL_BLOCK_KEY)
    d.show("local-2 on an empty cluster")
    d.notice(
        f"as upstream: both pods in one local block ({one(d.domains(pods, LOCAL_BLOCK_KEY))}); "
        "the PodGroup's DOMAIN column names it."
    )


def local_4(d: Demo) -> None:
    d.create_job(job_manifest("local-4", 4, key=LOCAL_BLOCK_KEY))
    cond = d.wait_waiting("local-4", 4)
    d.check("0/4 placements are available" in cond["message"], "0/4 placements (one per local block)", cond)
    admitted = condition(d.group_of("local-4"), "Admitted") or {}
    d.check(
        "it can never fit in this cluster" in str(admitted.get("message")),
        "Admitted says it can never fit in this cluster",
        admitted,
    )
    d.show("local-4: no local block has 4 nodes")
    d.say(f"Admitted={admitted.get('status')} {admitted.get('reason')}: {admitted.get('message')}")
    d.notice(
        "as upstream: 0/4 placements are available and the gang waits (required topology, no fallback). "
        "Phalanx also says it can never fit here, so nobody waits for room that cannot come."
    )


def block_4(d: Demo) -> None:
    d.create_job(job_manifest("block-4", 4, key=NETWORK_BLOCK_KEY))
    pods = d.wait_bound("block-4", 4, NETWORK_BLOCK_KEY)
    d.check(len({p["spec"]["nodeName"] for p in pods}) == 4, "the 4 pods on the 4 nodes of one network block")
    d.show("block-4 on an empty cluster")
    d.notice(
        f"as upstream: the 4 pods take the 4 nodes of one network block ({one(d.domains(pods))}), "
        "across its two local blocks."
    )


# ---------------------------------------------------------------------- best fit


def best_fit(d: Demo) -> None:
    runs = 1 if d.short else BEST_FIT_RUNS
    for busy, tighter, other in (("was-worker", "nb-a", "nb-b"), ("was-worker5", "nb-b", "nb-a")):
        d.fill(busy)
        chosen = []
        for run in range(runs):
            name = f"block-3-{run}"
            d.create_job(job_manifest(name, 3, key=NETWORK_BLOCK_KEY))
            pods = d.wait_bound(name, 3, NETWORK_BLOCK_KEY)
            chosen.append(one(d.domains(pods)))
            if run == runs - 1:
                d.show(f"busy node {busy}: {tighter} has 3 free nodes, {other} has 4")
            d.delete_job(name)
        d.say(f"busy node in {tighter}: block-3 went to {', '.join(chosen)}")
        d.check(chosen == [tighter] * runs, f"the tighter block {tighter}, {runs} of {runs} runs", chosen)
        d.unfill(busy)
    d.notice(
        "upstream v1.37 chose between the blocks at random here (6 runs: nb-b, nb-a, nb-a, nb-a, nb-b, "
        "nb-a) until nvidia.com/gpu was added to kube-scheduler's scoring. Phalanx takes the tighter "
        "block every time (best fit), with no scheduler configuration, keeping a whole block free."
    )


# ---------------------------------------------------------------------- slices

SLICES = ("slices-0", "slices-1")
API = "scheduling.phalanx.dev/v1beta1"


def slice_objects() -> list[tuple[dict[str, Any], str]]:
    """The article's Workload, CompositePodGroup and two PodGroups, in Phalanx's API group: a gang of two
    slices in one network block, each slice a gang of two pods in one local block."""
    nb = {"topology": [{"key": NETWORK_BLOCK_KEY}]}
    lb = {"topology": [{"key": LOCAL_BLOCK_KEY}]}
    workload = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "slices"},
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "job",
                    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                    "schedulingConstraints": nb,
                    "podGroupTemplates": [
                        {
                            "name": "slice",
                            "schedulingPolicy": {"gang": {"minCount": 2}},
                            "schedulingConstraints": lb,
                        }
                    ],
                }
            ]
        },
    }
    composite = {
        "apiVersion": API,
        "kind": "CompositePodGroup",
        "metadata": {"name": "slices"},
        "spec": {
            "workloadRef": {"workloadName": "slices", "templateName": "job"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "schedulingConstraints": nb,
        },
    }
    groups = [
        {
            "apiVersion": API,
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "parentCompositePodGroupName": "slices",
                "workloadRef": {"workloadName": "slices", "templateName": "slice"},
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": lb,
            },
        }
        for name in SLICES
    ]
    return [(workload, "workloads"), (composite, "compositepodgroups"), *((g, "podgroups") for g in groups)]


def slice_pod(group: str, index: int) -> dict[str, Any]:
    """The article's slice pod; it joins its PodGroup by Phalanx's label (upstream: spec.schedulingGroup)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{index}", "labels": {"app": "slices", keys.POD_GROUP_LABEL: group}},
        "spec": {
            "containers": [{"name": "worker", "image": PAUSE_IMAGE, "resources": {"limits": {GPU: "8"}}}]
        },
    }


def create_slices(d: Demo) -> None:
    d.command(
        "kubectl apply -f slices.yaml   # Workload slices; CompositePodGroup slices: gang of 2 groups in one "
        "network block; PodGroups slices-0, slices-1: gang of 2 pods in one local block"
    )
    for obj, plural in slice_objects():
        d.create(obj, plural)
    d.command(f"kubectl apply -f slice-pods.yaml   # 2 pods per slice, label {keys.POD_GROUP_LABEL}=<slice>")
    for group in SLICES:
        for index in (0, 1):
            d.create(slice_pod(group, index), "pods")


def slice_pods(d: Demo) -> list[Mapping[str, Any]]:
    return [p for p in d.pods() if p["metadata"].get("labels", {}).get("app") == "slices"]


def slices_placed(d: Demo) -> list[Mapping[str, Any]] | None:
    """All 4 slice pods bound, each slice in one local block of its own, both in one network block."""
    pods = slice_pods(d)
    if len(bound(pods)) != 4:
        return None
    blocks = [
        d.domains([p for p in pods if p["metadata"]["name"].startswith(g)], LOCAL_BLOCK_KEY) for g in SLICES
    ]
    if any(len(b) != 1 for b in blocks) or blocks[0] == blocks[1] or len(d.domains(pods)) != 1:
        return None
    return pods


def composite_phase(d: Demo, name: str) -> str:
    body = d.api.get(d.path(f"/apis/{API}/namespaces/{{ns}}/compositepodgroups/{name}"))
    return str((body.get("status") or {}).get("phase") or "")


def admitted(d: Demo, plural: str, name: str, status: str) -> dict[str, Any] | None:
    path = f"/apis/{API}/namespaces/{{ns}}/{plural}/{name}"
    cond = condition(d.api.get(d.path(path)), "Admitted")
    return cond if cond and cond["status"] == status else None


def slices(d: Demo) -> None:
    create_slices(d)
    pods = d.wait(
        "the 4 slice pods bound: each slice in its own local block, both in one network block",
        lambda: slices_placed(d),
    )
    d.wait(
        "CompositePodGroup slices Admitted=True", lambda: admitted(d, "compositepodgroups", "slices", "True")
    )
    d.show(f"slices on an empty cluster, both in {one(d.domains(pods))}")
    d.reset()

    d.fill("was-worker", "was-worker3", "was-worker5")  # one busy node in lb-a1, lb-a2 and lb-b1
    create_slices(d)
    why = d.wait(
        "CompositePodGroup slices Admitted=False (Unschedulable)",
        lambda: admitted(d, "compositepodgroups", "slices", "False"),
    )
    d.wait(
        "PodGroups slices-0 and slices-1 Admitted=False",
        lambda: all(admitted(d, "podgroups", group, "False") for group in SLICES),
    )
    d.hold("no slice pod binds", lambda: not bound(slice_pods(d)))
    d.show("one busy node in lb-a1, lb-a2 and lb-b1: only lb-b2 has room for a slice")
    d.say(f"CompositePodGroup slices: Admitted=False {why['reason']}: {why['message']}")
    d.unfill("was-worker5")
    pods = d.wait("the whole job placed once lb-b1 is free", lambda: slices_placed(d))
    d.check(d.domains(pods) == {"nb-b"}, "both slices in nb-b", d.domains(pods))
    d.wait(  # its status follows the bindings a moment later (the pass after kube-scheduler bound them)
        "CompositePodGroup slices Running",
        lambda: composite_phase(d, "slices") == "Running",
    )
    d.show("was-worker5 freed: nb-b has room for both slices")
    d.notice(
        "as upstream: each slice in its own local block, both in one network block; with three local blocks "
        "busy the whole job waits. Upstream's CompositePodGroup had no condition (the reason was only on the "
        "PodGroups); Phalanx's says why, per slice."
    )


# ---------------------------------------------------------------------- preemption


def ensure_priority_classes(d: Demo) -> None:
    for name, value in PRIORITY_CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        try:
            d.api.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
            d.command(f"kubectl create priorityclass {name} --value {value}")
        except ApiError as e:
            if e.status != 409:
                raise
    values = {
        n: int(d.api.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{n}")["value"])
        for n in PRIORITY_CLASSES
    }
    if values["low"] >= values["high"]:
        raise StepError(f"PriorityClass low must be below high; found {values}")


def preemption(d: Demo) -> None:
    ensure_priority_classes(d)
    originals: dict[str, set[str]] = {}
    for name in ("low-a", "low-b"):
        d.create_job(
            job_manifest(name, 4, key=NETWORK_BLOCK_KEY, priority_class="low", disruption_mode="single")
        )
        originals[name] = names(d.wait_bound(name, 4, NETWORK_BLOCK_KEY))
    d.show("low-a and low-b fill both network blocks")
    d.create_job(job_manifest("high-2", 2, key=LOCAL_BLOCK_KEY, priority_class="high"))
    high = d.wait_bound("high-2", 2, LOCAL_BLOCK_KEY, timeout=90)
    events = d.wait(
        "one low Job preempted (event Preempted)",
        lambda: [e for e in d.events("Job") if e["reason"] == "Preempted"] or None,
    )
    victims = {e["involvedObject"]["name"] for e in events}
    d.check(len(victims) == 1, "exactly one gang preempted", sorted(victims))
    (victim,) = victims
    survivor = "low-b" if victim == "low-a" else "low-a"

    def requeued_whole() -> list[Mapping[str, Any]] | None:
        pods = d.job_pods(victim)
        fresh = [p for p in pods if p["metadata"]["name"] not in originals[victim]]
        return pods if len(pods) == 4 and len(fresh) == 4 and len(gated(fresh)) == 4 else None

    d.wait(f"{victim} requeued whole: 4 new pods, all held by the gate", requeued_whole)
    d.hold(f"no {victim} pod binds", lambda: not bound(d.job_pods(victim)))
    d.check(
        names(bound(d.job_pods(survivor))) == originals[survivor],
        f"{survivor} untouched: its 4 pods still bound",
    )
    failed = int(d.job(victim).get("status", {}).get("failed") or 0)
    d.check(failed == 0, f"{victim}'s Job counted no failure (status.failed 0)", failed)
    d.show(f"high-2 in {one(d.domains(high, LOCAL_BLOCK_KEY))}, {victim} requeued whole")
    d.say(f"event Preempted on Job {victim}: {events[0]['message']}")
    d.notice(
        "upstream with disruptionMode single deleted 2 of low-b's 4 pods and left 2 running: a partial gang "
        "holding 2 nodes, its replacements Pending; with all, the new pods came only after ~80 s of Job "
        f"failure backoff. Phalanx preempts one gang and requeues it whole at once: {victim}'s 4 new pods "
        f"wait behind the gate, no failure counted, {survivor} untouched."
    )


def free_block(d: Demo) -> None:
    ensure_priority_classes(d)
    d.create_job(job_manifest("low-a", 4, key=NETWORK_BLOCK_KEY, priority_class="low"))
    low = names(d.wait_bound("low-a", 4, NETWORK_BLOCK_KEY))
    d.create_job(job_manifest("high-2", 2, key=LOCAL_BLOCK_KEY, priority_class="high"))
    d.wait_bound("high-2", 2, LOCAL_BLOCK_KEY)
    d.hold("low-a keeps its 4 pods", lambda: names(bound(d.job_pods("low-a"))) == low)
    preempted = [e["message"] for e in d.events("Job") if e["reason"] == "Preempted"]
    d.check(not preempted, "nothing preempted", preempted)
    d.show("high-2 beside low-a")
    d.notice(
        "the article's update says upstream's preemption can evict even when free capacity exists "
        "(kubernetes/kubernetes#142718). Phalanx preempts only when the gang fits nowhere: high-2 took a "
        "free local block and low-a kept running."
    )


# ---------------------------------------------------------------------- node failure


def node_failure(d: Demo) -> None:
    d.fill(*NB_B)
    d.create_job(job_manifest("train-3", 3, key=NETWORK_BLOCK_KEY))
    pods = d.wait_bound("train-3", 3, NETWORK_BLOCK_KEY)
    d.check(d.domains(pods) == {"nb-a"}, "train-3 in nb-a (nb-b is busy)", d.domains(pods))
    d.unfill(*NB_B)
    d.show("train-3 in nb-a, one node of nb-a free, nb-b free")

    first = sorted(p["spec"]["nodeName"] for p in pods)[0]
    d.fail_node(first)

    def replaced() -> list[Mapping[str, Any]] | None:
        pods = d.job_pods("train-3")
        nodes = {p["spec"]["nodeName"] for p in bound(pods)}
        return pods if len(bound(pods)) == 3 and first not in nodes and d.domains(pods) == {"nb-a"} else None

    pods = d.wait(f"train-3 whole again in nb-a, off {first}", replaced)
    d.show(f"{first} failed: its pod replaced inside nb-a")

    second = sorted(p["spec"]["nodeName"] for p in pods)[0]
    d.fail_node(second)
    d.say("(Phalanx waits --node-failure-grace, 30 s by default, for room in nb-a before it requeues)")

    def moved() -> list[Mapping[str, Any]] | None:
        pods = d.job_pods("train-3")
        return pods if len(bound(pods)) == 3 and d.domains(pods) == {"nb-b"} else None

    d.wait("train-3 requeued whole and running in nb-b", moved, timeout=REQUEUE_TIMEOUT)
    d.wait(
        "the PodGroup Running in nb-b",
        lambda: (s := d.group_status("train-3")).get("domain") == "nb-b" and s.get("phase") == "Running",
    )
    requeued = [e["message"] for e in d.events("Job", "train-3") if e["reason"] == "Requeued"]
    d.check(bool(requeued), "event Requeued on Job train-3")
    d.show(f"{second} failed too: nb-a has no room, train-3 requeued whole into nb-b")
    d.say(f"event Requeued on Job train-3: {requeued[0]}")
    d.notice(
        "upstream also replaced the first pod inside nb-a, but after the second failure left train-3 with "
        "2 pods Running and 1 Pending for good. Phalanx requeued it whole and it runs in nb-b."
    )


# ---------------------------------------------------------------------- suspend / resume


def suspend_resume(d: Demo) -> None:
    d.create_job(job_manifest("gang-4", 4))
    d.wait_bound("gang-4", 4)
    d.patch_job(
        "gang-4", {"spec": {"suspend": True}}, 'kubectl patch job gang-4 -p \'{"spec":{"suspend":true}}\''
    )
    d.wait(
        "gang-4's pods gone",
        lambda: (
            not d.job_pods("gang-4")
            and not [p for p in d.pods() if p["metadata"].get("labels", {}).get("job-name") == "gang-4"]
        ),
    )
    d.wait(
        "Admitted=False Suspended",
        lambda: (c := condition(d.group_of("gang-4"), "Admitted")) and c["reason"] == "Suspended",
    )
    d.show("gang-4 suspended")
    d.fill(*FIVE_BUSY)
    d.patch_job(
        "gang-4", {"spec": {"suspend": False}}, 'kubectl patch job gang-4 -p \'{"spec":{"suspend":false}}\''
    )
    cond = d.wait_waiting("gang-4", 4, kind="Admitted")
    d.check(cond["reason"] == "Unschedulable", "Admitted=False Unschedulable", cond)
    initial = condition(d.group_of("gang-4"), "PodGroupInitiallyScheduled") or {}
    d.check(initial.get("status") == "True", "PodGroupInitiallyScheduled still True, as upstream", initial)
    d.show("gang-4 resumed with 3 free nodes")
    d.say(f"PodGroupInitiallyScheduled={initial.get('status')} {initial.get('reason')}")
    d.say(f"Admitted={cond['status']} {cond['reason']}: {cond['message']}")
    d.notice(
        "as upstream, the gang holds after a resume: all 4 pods wait. Upstream's only condition still said "
        "Scheduled and the reason was only in pod events; Phalanx keeps that condition as upstream does and "
        "its Admitted condition says why the group waits now."
    )


STEPS: list[Step] = [
    Step("plain-4", "without a gang: plain-4 (basic), 5 nodes busy", plain_4),
    Step("gang-4", "with a gang: gang-4 with 3 free nodes, then 4", gang_4),
    Step("local-2", "topology: two pods in one local block", local_2),
    Step("local-4", "topology: four pods in one local block (none has four nodes)", local_4),
    Step("block-4", "topology: four pods in one network block", block_4),
    Step("best-fit", "best fit: block-3 with one busy node in lb-a1, then in lb-b1", best_fit),
    Step(
        "slices",
        "slices: two slices of two pods, each in one local block, both in one network block",
        slices,
    ),
    Step(
        "preemption", "preemption: low-a and low-b fill the cluster, then high-2 (priority high)", preemption
    ),
    Step(
        "free-block",
        "preemption not needed: low-a fills one network block, then high-2",
        free_block,
        full_only=True,
    ),
    Step("node-failure", "a node fails under train-3, then a second one", node_failure),
    Step("suspend-resume", "suspend and resume: gang-4 suspended, 3 nodes free, resumed", suspend_resume),
    Step(
        "kueue",
        "Kueue decides who may run, Phalanx where: two gangs queued, quota for one (the kueue addon)",
        kueue,
        full_only=True,
    ),
    *KIND_STEPS,  # JobSet, TrainJob, LeaderWorkerSet: skipped where their controllers do not run
]
