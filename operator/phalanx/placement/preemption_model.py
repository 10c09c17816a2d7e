"""Value types of victim choice (preemption.py): who could be preempted, and what was chosen.

All frozen. Pod ids and group keys are opaque strings (the controller uses "namespace/name").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .composite import CompositeAdmit
from .model import Admit

DisruptionMode: TypeAlias = Literal["single", "all"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running pod that holds capacity in the snapshot and might be preempted.

    `node` and `requests` must be those of the pod the snapshot counts under `id` (the same values
    as its `BoundPod`); ids the snapshot does not count are ignored. `group` names the `VictimGroup`
    of a pod Phalanx manages; None for any other pod (it is a victim on its own, like a pod
    kube-scheduler preempts). A pod naming a group that is not given is never a victim.
    """

    id: str
    node: str
    requests: Mapping[str, int]
    priority: int
    started: float
    """When the pod started, in seconds (any epoch, the same for all candidates); compared at
    microsecond resolution."""
    group: str | None = None


@dataclass(frozen=True, slots=True)
class VictimGroup:
    """A Phalanx-managed pod group whose pods are candidates.

    Every pod of the group that holds capacity must be passed as a `Candidate` (whatever its
    priority): they are the group's running pods, the ones minCount is counted against. The
    group's priority is the highest priority among them.

    - `all`: the group is preempted with all its pods or not at all.
    - `single`: pods may be preempted one by one while the group keeps at least `min_count`
      running pods; taking more makes the whole group the victim (never half a gang).
      A basic (non-gang) group is `single` with `min_count` 1.
    - `partial=False`: a `single` group that must not lose pods one by one (losing them could fail its
      Job: no podFailurePolicy ignoring disruptions and no backoff budget left) is taken whole or not at
      all, and priced whole (all its pods, one group), exactly like `all`; the caller then requeues it
      whole. For an `all` group it changes nothing.
    """

    key: str
    min_count: int
    disruption: DisruptionMode = "single"
    partial: bool = True


@dataclass(frozen=True, slots=True, order=True)
class VictimCost:
    """The cost of a victim set, compared field by field (smaller is cheaper).

    - `priority`: the highest priority among the victims;
    - `groups`: victim groups, whole or partial; a pod Phalanx does not manage counts as a group;
    - `pods`: victim pods (every pod of a whole group, also those outside the domain);
    - `newest`: minus the sum of the victims' start times in microseconds, so that, with the same
      number of pods, the victims that started most recently (the least run time lost) are cheaper;
    - `spread`: of victim sets equal in all the above, how scattered the room they free is — per level
      below the preemptor's domain, coarse to fine, ending with the nodes (the lowest level always), how
      many domains hold a victim that sits in the domain on a node some pod of the preemptor may use; so
      the set whose removal completes one rack (one node) beats one that leaves holes in several. Pod
      start times have whole seconds in Kubernetes, so pods that started together (those of one gang,
      or of one rollout) tie on `newest` and this decides among them.
    """

    priority: int
    groups: int
    pods: int
    newest: int
    spread: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Preemption:
    """Victims whose removal lets the group be admitted, and the admission it then gets."""

    domain: str | None
    """The domain of `admit` (None without a topology key)."""
    victims: tuple[str, ...]
    """Pod ids to preempt, sorted."""
    whole_groups: tuple[str, ...]
    """Keys of the victim groups that lose all their pods, sorted."""
    partial_groups: tuple[str, ...]
    """Keys of `single` victim groups that lose some pods and keep at least minCount, sorted."""
    admit: Admit
    """`decide(snapshot.without(victims), group)`."""
    cost: VictimCost
    exact: bool
    """True when the search proved this victim set the cheapest; False when it stopped at its step
    budget and returned the cheapest set found so far (still a valid preemption)."""


@dataclass(frozen=True, slots=True)
class CompositePreemption:
    """Victims whose removal lets a composite group's whole tree be admitted (`choose_composite_victims`)."""

    domain: str | None
    """The root's domain in `admit` (None without a key on the root)."""
    victims: tuple[str, ...]
    """Pod ids to preempt, sorted."""
    whole_groups: tuple[str, ...]
    partial_groups: tuple[str, ...]
    admit: CompositeAdmit
    """`decide_composite(snapshot.without(victims), root)`."""
    cost: VictimCost
    exact: bool
