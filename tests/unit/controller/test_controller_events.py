"""Event aggregation, the pure part: the key, the deterministic name, create-or-bump, the LRU."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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


def key(involved: ObjectRef = JOB, type_: str = "Normal", reason: str = "Admitted") -> EventKey:
    return EventKey.of(involved, type_, reason)


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
        key(ObjectRef("batch/v1", "Job", "ml", "train", "uid-2")).event_name,  # a new Job of the same name
        key(ObjectRef("batch/v1", "Job", "other", "train", "uid-1")).event_name,
        key(ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", "ml", "train", "uid-1")).event_name,
    }
    assert len(names) == 6


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


def test_long_messages_are_truncated_in_the_body_and_the_bump() -> None:
    action = decide(key(), None, JOB, "x" * 5000, "me", NOW)
    assert isinstance(action, Create)
    message = action.body["message"]
    assert len(message) == MAX_MESSAGE and message.endswith("...")
    repeat = decide(key(), Seen(key().event_name, 1), JOB, "y" * 5000, "me", NOW)
    assert isinstance(repeat, Bump)
    assert len(repeat.patch["message"]) == MAX_MESSAGE


def test_first_post_creates_with_count_1() -> None:
    action = decide(key(), None, JOB, "m", "replica-a", NOW)
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


def test_a_repeat_bumps_count_and_last_timestamp_and_takes_the_latest_message() -> None:
    action = decide(key(), Seen(key().event_name, 2), JOB, "m", "replica-a", NOW)
    assert action == Bump(key().event_name, 3, {"count": 3, "lastTimestamp": NOW, "message": "m"})
    later = decide(key(), Seen(key().event_name, 3), JOB, "retrying in 8 s", "replica-a", NOW)
    assert later == Bump(
        key().event_name, 4, {"count": 4, "lastTimestamp": NOW, "message": "retrying in 8 s"}
    )


@given(
    reason=st.sampled_from(["FailedSync", "Unschedulable", "Requeued"]),
    numbers=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
)
def test_messages_that_differ_in_their_numbers_count_on_one_event(reason: str, numbers: list[int]) -> None:
    """Posted as the recorder posts (decide, then remember): "3 of 4 pods fit; retrying in 4 s", then the
    same with other numbers, is one Event whose count is the number of posts and whose message is the last."""
    seen = SeenEvents()
    names = set()
    body: dict[str, object] = {}
    for n in numbers:
        k = EventKey.of(JOB, "Warning", reason)
        action = decide(k, seen.get(k), JOB, f"{n} of 4 pods fit; retrying in {n} s", "me", NOW)
        if isinstance(action, Create):
            body = dict(action.body)
            seen.put(k, Seen(k.event_name, 1))
            names.add(k.event_name)
        else:
            body.update(action.patch)
            seen.put(k, Seen(action.name, action.count))
            names.add(action.name)
    assert len(names) == 1
    assert body["count"] == len(numbers)
    assert body["message"] == f"{numbers[-1]} of 4 pods fit; retrying in {numbers[-1]} s"


def test_the_lru_keeps_the_most_recently_used() -> None:
    seen = SeenEvents(size=2)
    a, b, c = key(reason="a"), key(reason="b"), key(reason="c")
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
