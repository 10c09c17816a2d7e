"""Every access the operator's own client makes, declared in one place: the client refuses any other.

kubeclient/access.py says why. The chart's RBAC is checked against `declared()` for the chart's own
settings (tests/unit/deploy/test_deploy_rbac.py); Kopf's requests (its watches, its CRD scan, its
events) go through Kopf's client and are listed there. Add a new call here, with where it is made.
"""

from __future__ import annotations

from phalanx.api.group import GROUP
from phalanx.api.trainjob import API_GROUP as TRAINER_GROUP
from phalanx.api.trainjob import RUNTIME_PLURALS
from phalanx.controller.kinds import OWNER_KINDS
from phalanx.controller.model.kueue import KUEUE_GROUP
from phalanx.controller.process.settings import Settings
from phalanx.controller.watch.watched import INFORMER, WATCHED, served_by
from phalanx.kubeclient import Access

# Phalanx's own kinds (apply/kube.py), by verb: what is made, read back on a 409, deleted, patched.
OURS: dict[str, tuple[str, ...]] = {
    "create": ("workloads", "podgroups", "compositepodgroups"),  # compositepodgroups: a Job's slices
    "get": ("workloads", "podgroups", "compositepodgroups"),  # a create meeting 409 reads the object
    "delete": ("workloads", "podgroups", "compositepodgroups"),
    "patch": ("podgroups", "podgroups/status", "compositepodgroups/status", "topologies/status"),
    "list": ("topologies",),  # the Topology webhook reads every Topology live
}
ALWAYS: frozenset[Access] = frozenset(
    {
        Access("", "pods", "patch"),  # apply/kube.py: release (nodeSelector + gate), label, ungate
        Access("", "pods", "delete"),  # a requeue deletes the gang's pods; the owner makes them again
        Access("", "pods/status", "patch"),  # the DisruptionTarget condition before a delete or eviction
        Access("", "pods/eviction", "create"),  # preemption, through PodDisruptionBudgets
        Access("batch", "jobs", "patch"),  # suspend / resume a Job to requeue it whole
        # A Kueue-managed owner is requeued through Kueue: its Kueue Workload deactivated, then activated.
        Access(KUEUE_GROUP, "workloads", "patch"),
        Access("", "events", "create"),  # apply/events.py: a new Event
        Access("", "events", "get"),  # ... one made before this process knew it (409): read to bump it
        Access("", "events", "patch"),  # ... a repeat bumps its count
        *(Access(GROUP, plural, verb) for verb, plurals in OURS.items() for plural in plurals),
    }
)
LEADER_ELECTION = frozenset(
    Access("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
)
WEBHOOK_SECRET = frozenset(Access("", "secrets", verb) for verb in ("get", "create", "update"))
CA_INJECTION = frozenset(
    Access("admissionregistration.k8s.io", plural, verb)
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    for verb in ("get", "patch")
)
# watch/trainjob_gate.py: the runtime a TrainJob refers to, read live at its creation.
TRAINER_RUNTIMES = frozenset(Access(TRAINER_GROUP, plural, "get") for plural in RUNTIME_PLURALS.values())
INSTALL_CRDS = frozenset(
    Access("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("get", "patch")
)


def declared(settings: Settings) -> frozenset[Access]:
    """What `phalanx run` with these settings may ask of the API through its own client."""
    accesses = set(ALWAYS)
    # The cache's priming and the Relister list every watched kind; the informers watch theirs.
    accesses |= {Access(row.resource.group, row.plural, "list") for row in WATCHED}
    accesses |= {Access(r.resource.group, r.plural, "watch") for r in served_by(INFORMER, settings.informers)}
    # apply/kube.py patch_owner: a requeue suspends and resumes an owner that can be suspended.
    accesses |= {Access(k.resource.group, k.resource.plural, "patch") for k in OWNER_KINDS if k.suspends}
    # apply/owners.py: whether an owner whose objects went while it seemed alive still is.
    accesses |= {Access(k.resource.group, k.resource.plural, "get") for k in OWNER_KINDS}
    if settings.serves_webhooks:
        accesses |= TRAINER_RUNTIMES
    if settings.leader_election:
        accesses |= LEADER_ELECTION
    if settings.webhook_secret:
        accesses |= WEBHOOK_SECRET
        if not settings.kopf_manages_webhooks:
            accesses |= CA_INJECTION  # process/webhook_tls.py: the caBundle of our own configurations
    if settings.install_crds:
        accesses |= INSTALL_CRDS
    return frozenset(accesses)
