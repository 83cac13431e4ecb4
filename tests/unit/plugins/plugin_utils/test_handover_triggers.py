# SPDX-License-Identifier: GPL-3.0-or-later
"""When the event source announces a run: bursts, repeats, the Lease, idle nodes."""

from __future__ import annotations

import json
import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import Policy
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import microtime
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.triggers import (
    PoolWatch,
    Trigger,
    TriggerSettings,
    WatchedKind,
)

POOL = {"hpcops.io/pool": "interactive"}
POLICY = Policy(
    pool_selector=POOL,
    headroom=1,
    lend_min_idle_s=600,
    relend_cooldown_s=1800,
    demand_selector={"hpcops.io/demand": "true"},
)
SETTINGS = TriggerSettings(policy=POLICY, debounce_s=2, repeat_s=30)
T0 = 1_700_000_000.0


def pod(
    name: str,
    *,
    namespace: str = "jupyterhub",
    node: str = "",
    unschedulable: bool = True,
    labels: dict[str, str] | None = None,
    owner: str = "",
) -> dict[str, t.Any]:
    conditions = (
        [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        if unschedulable and not node
        else []
    )
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"hpcops.io/demand": "true"} if labels is None else labels,
            "ownerReferences": [{"kind": owner}] if owner else [],
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running" if node else "Pending", "conditions": conditions},
    }


def node(
    name: str, *, journal: dict[str, t.Any] | None = None, labels: dict[str, str] | None = None
) -> dict[str, t.Any]:
    annotations = {"hpcops.io/handover": json.dumps(journal)} if journal else {}
    return {
        "metadata": {"name": name, "labels": dict(labels or POOL), "annotations": annotations},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def lease(holder: str, renewed: float, duration: int = 900) -> dict[str, t.Any]:
    return {
        "metadata": {"name": "hpcops-slinky-handover", "namespace": "slinky"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": microtime(renewed),
        },
    }


def watch_with_lent_pool() -> PoolWatch:
    """Every pool node lent: nothing idle, so only demand can trigger."""
    watch = PoolWatch(SETTINGS)
    lent = {"state": "lent", "op": "a1", "since": T0 - 3600}
    watch.replace(WatchedKind.NODE, [node("int01", journal=lent), node("int02", journal=lent)])
    watch.replace(WatchedKind.POD, [])
    return watch


def test_a_burst_of_fifty_pending_pods_is_one_event_at_once() -> None:
    watch = watch_with_lent_pool()
    for i in range(50):
        watch.apply(WatchedKind.POD, "ADDED", pod(f"nb-{i:02d}"))
    event, wake = watch.due(T0)
    assert event is not None and event["trigger"] == Trigger.DEMAND
    assert len(event["pods"]) == 50 and event["pods"][0] == "jupyterhub/nb-00"
    assert event["reason"].startswith("50 unschedulable application pod(s): jupyterhub/nb-00, ")
    assert event["reason"].endswith(" and 45 more")
    # Announced: the same pods wait for the repeat, not for every look.
    assert wake == T0 + 30
    assert [watch.due(T0 + s)[0] for s in (1, 10, 29)] == [None, None, None]


def test_pods_that_follow_an_announcement_are_gathered_for_the_debounce() -> None:
    watch = watch_with_lent_pool()
    watch.apply(WatchedKind.POD, "ADDED", pod("nb-a"))
    first, _wake = watch.due(T0)
    assert first is not None and first["pods"] == ["jupyterhub/nb-a"]
    for i, at in enumerate((0.5, 1.0, 1.5)):
        watch.apply(WatchedKind.POD, "ADDED", pod(f"nb-{i}"))
        event, wake = watch.due(T0 + at)
        assert event is None and wake == T0 + 2
    event, _wake = watch.due(T0 + 2)
    assert event is not None and len(event["pods"]) == 4


def test_demand_is_announced_again_while_pods_stay_unschedulable_and_stops_when_placed() -> None:
    watch = watch_with_lent_pool()
    watch.apply(WatchedKind.POD, "ADDED", pod("nb-a"))
    assert watch.due(T0)[0] is not None
    assert watch.due(T0 + 2)[0] is None
    again, _wake = watch.due(T0 + 30)
    assert again is not None and again["pods"] == ["jupyterhub/nb-a"]
    # A new pod in the meantime is announced after the debounce, not after the repeat.
    watch.apply(WatchedKind.POD, "ADDED", pod("nb-b"))
    assert watch.due(T0 + 31)[0] is None
    event, _wake = watch.due(T0 + 32)
    assert event is not None and event["pods"] == ["jupyterhub/nb-a", "jupyterhub/nb-b"]
    # Placed on a reclaimed node: no demand, nothing more.
    watch.apply(WatchedKind.POD, "MODIFIED", pod("nb-a", node="int01"))
    watch.apply(WatchedKind.POD, "DELETED", pod("nb-b"))
    assert watch.due(T0 + 100) == (None, None)


def test_pods_that_are_not_demand_trigger_nothing() -> None:
    watch = watch_with_lent_pool()
    watch.replace(
        WatchedKind.POD,
        [
            pod("sys", namespace="kube-system"),
            pod("ds", owner="DaemonSet"),
            pod("slurmd", namespace="slurm", owner="NodeSet"),
            pod("other", labels={"app": "x"}),  # outside the demand selector
            pod("placed", node="int01"),
            pod("waiting", unschedulable=False),  # not yet judged by the scheduler
        ],
    )
    assert watch.due(T0 + 60) == (None, None)


def test_nothing_is_announced_while_another_run_holds_the_lease() -> None:
    watch = watch_with_lent_pool()
    watch.apply(WatchedKind.LEASE, "ADDED", lease("timer-run", renewed=T0 - 10, duration=60))
    watch.apply(WatchedKind.POD, "ADDED", pod("nb-a"))
    event, wake = watch.due(T0)
    assert event is None and wake == T0 + 50  # when the holder's time runs out
    # The run gives it back (holderIdentity cleared): the event goes out at once.
    watch.apply(WatchedKind.LEASE, "MODIFIED", lease("", renewed=T0 + 5))
    event, _wake = watch.due(T0 + 6)
    assert event is not None and event["trigger"] == Trigger.DEMAND
    # An expired holder does not hold it either.
    watch.apply(WatchedKind.LEASE, "MODIFIED", lease("crashed-run", renewed=T0 - 1000, duration=60))
    assert watch.due(T0 + 36)[0] is not None


def test_idle_free_nodes_are_announced_to_be_recorded_then_when_lendable_once_each() -> None:
    watch = PoolWatch(SETTINGS)
    watch.replace(WatchedKind.POD, [pod("busy", node="int03")])
    watch.replace(WatchedKind.NODE, [node("int01"), node("int02"), node("int03")])
    # int01 and int02 idle, more than the headroom of 1: a run records their idle_since.
    event, wake = watch.due(T0)
    assert event is not None and event["trigger"] == Trigger.IDLE
    assert event["nodes"] == ["int01", "int02"] and wake is None
    assert watch.due(T0 + 1) == (None, None)
    # The run wrote idle_since: lendable lend_min_idle_s later, announced then, once.
    for name in ("int01", "int02"):
        watch.apply(
            WatchedKind.NODE,
            "MODIFIED",
            node(name, journal={"state": "free", "idle_since": T0 + 5}),
        )
    event, wake = watch.due(T0 + 10)
    assert event is None and wake == T0 + 605
    event, _wake = watch.due(T0 + 605)
    assert event is not None and event["nodes"] == ["int01", "int02"]
    assert watch.due(T0 + 700)[0] is None


def test_idle_nodes_within_the_headroom_or_cooling_down_are_not_announced() -> None:
    watch = PoolWatch(SETTINGS)
    reclaimed = {"state": "free", "idle_since": T0 - 7200, "last_reclaim": T0 - 600}
    watch.replace(WatchedKind.NODE, [node("int01"), node("int02", journal=reclaimed)])
    watch.replace(WatchedKind.POD, [pod("busy", node="int01")])
    assert watch.due(T0) == (None, None)  # one idle node: the headroom keeps it
    watch.apply(WatchedKind.POD, "DELETED", pod("busy", node="int01"))
    event, _wake = watch.due(T0)
    assert event is not None and event["nodes"] == ["int01"]  # int02 was reclaimed 10 min ago
    event, wake = watch.due(T0 + 1)
    assert event is None and wake == T0 + 1200  # int02 once its cool-down ends


def test_a_relist_drops_what_is_gone_and_nodes_leaving_the_pool_are_forgotten() -> None:
    watch = watch_with_lent_pool()
    watch.apply(WatchedKind.POD, "ADDED", pod("nb-a"))
    watch.replace(WatchedKind.POD, [])  # after a 410 Gone: the pod was deleted meanwhile
    assert watch.due(T0 + 60) == (None, None)
    watch.apply(WatchedKind.NODE, "MODIFIED", node("int01", labels={"other": "pool"}))
    assert sorted(watch.nodes) == ["int02"]
    never = {**POOL, "hpcops.io/never-touch": "true"}
    settings = TriggerSettings(
        policy=Policy(pool_selector=POOL, never_touch_selector={"hpcops.io/never-touch": "true"})
    )
    guarded = PoolWatch(settings)
    guarded.apply(WatchedKind.NODE, "ADDED", node("gpu01", labels=never))
    assert guarded.nodes == {}


def test_a_node_lent_and_given_back_is_announced_again_when_idle() -> None:
    settings = TriggerSettings(
        policy=Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0, relend_cooldown_s=0)
    )
    watch = PoolWatch(settings)
    watch.replace(WatchedKind.POD, [])
    watch.replace(WatchedKind.NODE, [node("int01")])
    assert watch.due(T0)[0] is not None
    assert watch.due(T0 + 1)[0] is None  # announced once
    watch.apply(WatchedKind.NODE, "MODIFIED", node("int01", journal={"state": "lent", "op": "a"}))
    assert watch.due(T0 + 2)[0] is None
    watch.apply(
        WatchedKind.NODE,
        "MODIFIED",
        node("int01", journal={"state": "free", "last_reclaim": T0 + 3}),
    )
    event, _wake = watch.due(T0 + 4)
    assert event is not None and event["nodes"] == ["int01"]
