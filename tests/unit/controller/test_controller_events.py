"""Event aggregation, the pure part: the key, the deterministic name, create-or-bump, the LRU."""

from __future__ import annotations

from phalanx.api.formats import dns_subdomain_problems
from phalanx.controller.apply.events import (
    MAX_MESSAGE,
    Bump,
    Create,
    EventKey,
    Seen,
    SeenEvents,
    decide,
)
from phalanx.controller.model.refs import ObjectRef

JOB = ObjectRef("batch/v1", "Job", "ml", "train", "uid-1")
NOW = "2026-01-02T03:04:05Z"


def key(
    involved: ObjectRef = JOB, type_: str = "Normal", reason: str = "Admitted", message: str = "m"
) -> EventKey:
    return EventKey.of(involved, type_, reason, message)


def test_the_same_event_has_the_same_key_and_name() -> None:
    assert key() == key()
    assert key().event_name == key().event_name
    assert key().event_name.startswith("train.")
    assert len(key().event_name) == len("train.") + 16


def test_any_difference_is_another_event() -> None:
    names = {
        key().event_name,
        key(type_="Warning").event_name,
        key(reason="Unschedulable").event_name,
        key(message="other").event_name,
        key(ObjectRef("batch/v1", "Job", "ml", "train", "uid-2")).event_name,  # a new Job of the same name
        key(ObjectRef("batch/v1", "Job", "other", "train", "uid-1")).event_name,
        key(ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", "ml", "train", "uid-1")).event_name,
    }
    assert len(names) == 7


def test_names_are_valid_dns_subdomains_even_for_long_names() -> None:
    long = ObjectRef("batch/v1", "Job", "ml", "a" * 230 + "-" + "b" * 22, "u")
    name = key(long).event_name
    assert len(name) <= 253
    assert dns_subdomain_problems(name) == []
    dashed = ObjectRef("batch/v1", "Job", "ml", "a" * 236 + "-x", "u")
    assert dns_subdomain_problems(key(dashed).event_name) == [], "no '-' before the dot"


def test_cluster_scoped_objects_post_to_default() -> None:
    node = ObjectRef("v1", "Node", "", "node-1", "n-uid")
    assert key(node).event_namespace == "default"
    assert key().event_namespace == "ml"


def test_long_messages_are_truncated_in_the_key_and_the_body() -> None:
    k = key(message="x" * 5000)
    assert len(k.message) == MAX_MESSAGE and k.message.endswith("...")
    action = decide(k, None, JOB, "me", NOW)
    assert isinstance(action, Create)
    assert action.body["message"] == k.message


def test_first_post_creates_with_count_1() -> None:
    action = decide(key(), None, JOB, "replica-a", NOW)
    assert isinstance(action, Create)
    body = action.body
    assert body["metadata"] == {"name": key().event_name, "namespace": "ml"}
    assert body["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": "ml",
        "name": "train",
        "uid": "uid-1",
    }
    assert (body["type"], body["reason"], body["message"]) == ("Normal", "Admitted", "m")
    assert body["count"] == 1
    assert body["firstTimestamp"] == body["lastTimestamp"] == NOW
    assert body["source"] == {"component": "phalanx"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("phalanx", "replica-a")


def test_a_repeat_bumps_count_and_last_timestamp_only() -> None:
    action = decide(key(), Seen(key().event_name, 2), JOB, "replica-a", NOW)
    assert action == Bump(key().event_name, 3, {"count": 3, "lastTimestamp": NOW})


def test_the_lru_keeps_the_most_recently_used() -> None:
    seen = SeenEvents(size=2)
    a, b, c = key(message="a"), key(message="b"), key(message="c")
    seen.put(a, Seen(a.event_name, 1))
    seen.put(b, Seen(b.event_name, 1))
    assert seen.get(a) is not None  # a is now the most recent
    seen.put(c, Seen(c.event_name, 1))
    assert len(seen) == 2
    assert seen.get(b) is None
    assert seen.get(a) == Seen(a.event_name, 1)
    seen.put(a, Seen(a.event_name, 5))
    assert seen.get(a) == Seen(a.event_name, 5)
    seen.forget(a)
    assert seen.get(a) is None
