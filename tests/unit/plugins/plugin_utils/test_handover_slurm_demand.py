# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""When the event source announces Slurm's demand (lend_when demand): the jobs an idle pool
node would start, on the nodes a run could lend now; at once, gathered, repeated; never
while another run holds the Lease."""

from __future__ import annotations

import json
import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    LendablePartition,
    PendingJob,
    Shape,
    SlurmQueue,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import microtime
from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.triggers import (
    PoolWatch,
    Trigger,
    TriggerSettings,
    WatchedKind,
)

POOL = {"hpcops.io/pool": "interactive"}
GIB = 1 << 30
POLICY = Policy(
    pool_selector=POOL,
    headroom=0,
    lend_min_idle_s=600,
    relend_cooldown_s=1800,
    lend_when="demand",
    partitions={"backfill": PartitionPolicy(grace_s=300, escalation="requeue")},
)
SETTINGS = TriggerSettings(policy=POLICY, debounce_s=2, repeat_s=30)
T0 = 1_700_000_000.0
BACKFILL = {"backfill": LendablePartition("backfill", max_time_s=4 * 3600)}
# Idle long enough to be lent: int01 the longest.
LONG_IDLE = {"state": "free", "idle_since": T0 - 7200}
IDLE = {"state": "free", "idle_since": T0 - 3600}


def node(
    name: str,
    journal: dict[str, t.Any] | None = None,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, t.Any]:
    annotations = {"hpcops.io/handover": json.dumps(journal)} if journal else {}
    return {
        "metadata": {"name": name, "labels": dict(POOL), "annotations": annotations},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": cpu, "memory": memory},
        },
    }


def app_pod(name: str, node_name: str) -> dict[str, t.Any]:
    return {
        "metadata": {"name": name, "namespace": "jupyterhub", "labels": {}},
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running"},
    }


def waiting_pod(name: str) -> dict[str, t.Any]:
    return {
        "metadata": {"name": name, "namespace": "jupyterhub", "labels": {}},
        "spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def lease(holder: str, renewed: float, duration: int = 900) -> dict[str, t.Any]:
    return {
        "metadata": {"name": "hpcops-slinky-handover", "namespace": "slurm"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": microtime(renewed),
        },
    }


def job(job_id: int, **fields: t.Any) -> PendingJob:
    """A pending backfill job of one CPU and 1 GiB for 60 s, waiting for resources."""
    given: dict[str, t.Any] = {
        "partitions": ("backfill",),
        "per_node": Shape(1000, GIB),
        "time_limit_s": 60.0,
        "reason": "Resources",
        **fields,
    }
    return PendingJob(job_id=job_id, **given)


def queue(*jobs: PendingJob) -> SlurmQueue:
    return SlurmQueue(tuple(jobs), BACKFILL)


def watch(
    *nodes: dict[str, t.Any], pods: list[dict[str, t.Any]] | None = None, policy: Policy = POLICY
) -> PoolWatch:
    pool = PoolWatch(TriggerSettings(policy=policy, debounce_s=2, repeat_s=30))
    pool.replace(WatchedKind.NODE, list(nodes))
    pool.replace(WatchedKind.POD, pods or [])
    pool.replace(WatchedKind.LEASE, [])
    return pool


def test_a_job_an_idle_node_would_start_is_announced_at_once_with_that_node() -> None:
    pool = watch(node("int01", IDLE), node("int02", LONG_IDLE))
    assert pool.due(T0) == (None, None)  # no queue read yet: nothing to say
    pool.take_queue(queue(job(11)))
    event, wake = pool.due(T0)
    assert event == {
        "trigger": Trigger.SLURM_DEMAND,
        "reason": "1 job(s) waiting in Slurm that 1 idle pool node(s) would start: 11",
        "pods": [],
        "nodes": ["int02"],  # the longest idle first, as the planner lends
        "jobs": [11],
    }
    assert wake == T0 + 30  # the repeat


def test_the_reason_names_five_jobs_and_counts_the_rest_and_the_nodes() -> None:
    pool = watch(node("int01", IDLE), node("int02", LONG_IDLE), node("int03", IDLE))
    small = [job(i) for i in range(1, 8)]
    whole = [job(20 + i, exclusive=True, priority=10) for i in range(2)]
    pool.take_queue(queue(*small, *whole))
    event, _wake = pool.due(T0)
    assert event is not None
    # The two exclusive jobs (higher priority) take a node each; the seven small ones share
    # the third.
    assert sorted(event["nodes"]) == ["int01", "int02", "int03"]
    assert event["jobs"] == [1, 2, 3, 4, 5, 6, 7, 20, 21]
    assert event["reason"] == (
        "9 job(s) waiting in Slurm that 3 idle pool node(s) would start: 1, 2, 3, 4, 5 and 4 more"
    )


@pytest.mark.parametrize(
    "blocked",
    [
        job(1, held=True, reason="JobHeldUser"),
        job(2, per_node=Shape(64_000, GIB)),  # 64 CPUs; the pool's nodes have 32
        job(3, per_node=Shape(1000, 512 * GIB)),
        job(4, time_limit_s=3600.0, requeue=False),  # over the 300 s grace, not requeue-able
        job(5, time_limit_s=5 * 3600.0),  # over backfill's MaxTime
        job(6, dependency="afterok:1"),
        job(7, reason="QOSMaxJobsPerUserLimit"),
        job(8, partitions=("batch",)),  # not a polled partition
    ],
    ids=[
        "held",
        "too-wide",
        "too-much-memory",
        "over-grace",
        "over-maxtime",
        "dependency",
        "limit",
        "other-partition",
    ],
)
def test_jobs_a_lent_node_would_not_start_announce_nothing(blocked: PendingJob) -> None:
    pool = watch(node("int01", LONG_IDLE))
    pool.take_queue(queue(blocked))
    assert pool.due(T0) == (None, None)


def test_a_job_over_the_grace_that_may_be_requeued_counts() -> None:
    pool = watch(node("int01", LONG_IDLE))
    pool.take_queue(queue(job(4, time_limit_s=3600.0, requeue=True)))
    event, _wake = pool.due(T0)
    assert event is not None and event["jobs"] == [4]


@pytest.mark.parametrize(
    ("nodes", "pods"),
    [
        ([node("int01", LONG_IDLE)], [app_pod("nb", "int01")]),  # busy with a notebook
        ([node("int01", LONG_IDLE, ready=False)], []),
        ([node("int01", LONG_IDLE, cordoned=True)], []),
        ([node("int01", {"state": "lent", "op": "a", "since": T0 - 60})], []),
        ([node("int01", {"state": "lending", "op": "a", "since": T0 - 5})], []),
        # idle, but a waiting notebook needs it (the run reclaims, it lends nothing)
        ([node("int01", LONG_IDLE)], [waiting_pod("nb")]),
    ],
    ids=["busy", "not-ready", "cordoned", "lent", "lending", "apps-need-it"],
)
def test_nothing_is_announced_when_no_node_could_be_lent_now(
    nodes: list[dict[str, t.Any]], pods: list[dict[str, t.Any]]
) -> None:
    pool = watch(*nodes, pods=pods)
    pool.take_queue(queue(job(11)))
    # Whatever else is announced (the notebook's demand), never Slurm's.
    announced = [pool.due(T0 + s)[0] for s in (0, 0, 1, 40)]
    assert Trigger.SLURM_DEMAND not in [e["trigger"] for e in announced if e], announced


def test_a_node_within_lend_min_idle_s_is_announced_once_it_has_idled_long_enough() -> None:
    pool = watch(node("int01", {"state": "free", "idle_since": T0 - 100}))
    pool.take_queue(queue(job(11)))
    assert pool.due(T0) == (None, T0 + 500)  # lend_min_idle_s is 600
    event, _wake = pool.due(T0 + 500)
    assert event is not None and event["nodes"] == ["int01"]


def test_a_node_in_its_cool_down_is_announced_once_it_has_cooled() -> None:
    reclaimed = {"state": "free", "idle_since": T0 - 7200, "last_reclaim": T0 - 600}
    pool = watch(node("int01", reclaimed))
    pool.take_queue(queue(job(11)))
    assert pool.due(T0) == (None, T0 + 1200)  # relend_cooldown_s is 1800
    assert pool.due(T0 + 1200)[0] is not None


def test_a_node_without_idle_since_is_lendable_only_without_lend_min_idle_s() -> None:
    # As the planner: no idle_since yet counts as idle since now.
    pool = watch(node("int01"))
    pool.take_queue(queue(job(11)))
    event, _wake = pool.due(T0)
    assert event is not None and event["trigger"] == Trigger.IDLE  # a run records idle_since
    assert pool.due(T0 + 1) == (None, None)
    at_once = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0, lend_when="demand")
    pool = watch(node("int01"), policy=at_once)
    pool.take_queue(queue(job(11)))
    event, _wake = pool.due(T0)
    assert event is not None and event["trigger"] == Trigger.SLURM_DEMAND


@pytest.mark.parametrize(
    ("policy", "lends"),
    [
        (POLICY, 2),
        (Policy(pool_selector=POOL, headroom=1, lend_min_idle_s=0, lend_when="demand"), 1),
        (Policy(pool_selector=POOL, headroom=2, lend_min_idle_s=0, lend_when="demand"), 0),
        (Policy(pool_selector=POOL, headroom=0, max_lent=2, lend_when="demand"), 1),
        (Policy(pool_selector=POOL, headroom=0, max_changes_per_run=1, lend_when="demand"), 1),
    ],
    ids=["room-for-both", "headroom-1", "headroom-2", "max-lent", "max-changes"],
)
def test_only_as_many_nodes_as_a_run_could_lend_are_announced(policy: Policy, lends: int) -> None:
    lent = {"state": "lent", "op": "a", "since": T0 - 60}
    pool = watch(node("int01", IDLE), node("int02", LONG_IDLE), node("int03", lent), policy=policy)
    pool.take_queue(queue(job(11, exclusive=True), job(12, exclusive=True)))
    event, _wake = pool.due(T0)
    if lends == 0:
        assert event is None
    else:
        assert event is not None and len(event["nodes"]) == lends, event
        assert len(event["jobs"]) == lends


def test_jobs_that_follow_are_gathered_for_the_debounce_then_repeated() -> None:
    pool = watch(node("int01", LONG_IDLE))
    pool.take_queue(queue(job(11)))
    first, wake = pool.due(T0)
    assert first is not None and first["jobs"] == [11] and wake == T0 + 30
    # The next polls: a new job comes; it is gathered until the debounce has passed.
    pool.take_queue(queue(job(11), job(12)))
    assert pool.due(T0 + 0.5) == (None, T0 + 2)
    pool.take_queue(queue(job(11), job(12), job(13)))
    assert pool.due(T0 + 1.5) == (None, T0 + 2)
    event, wake = pool.due(T0 + 2)
    assert event is not None and event["jobs"] == [11, 12, 13] and wake == T0 + 32
    # The same jobs still wait, a node still free: again every repeat_s, not sooner.
    assert [pool.due(T0 + s)[0] for s in (3, 20, 31)] == [None, None, None]
    again, _wake = pool.due(T0 + 32)
    assert again is not None and again["jobs"] == [11, 12, 13]
    # A job that has been announced before and comes back is not new: the repeat holds.
    pool.take_queue(queue(job(12)))
    assert pool.due(T0 + 33) == (None, T0 + 62)
    # The node is lent (the run did it): nothing more, even while the job still waits.
    pool.apply(
        WatchedKind.NODE, "MODIFIED", node("int01", {"state": "lent", "op": "b", "since": T0 + 34})
    )
    assert pool.due(T0 + 70) == (None, None)
    # The queue empties while a node is free again: nothing either.
    pool.apply(WatchedKind.NODE, "MODIFIED", node("int01", LONG_IDLE))
    pool.take_queue(queue())
    assert pool.due(T0 + 80) == (None, None)
    # A new job then is announced at once.
    pool.take_queue(queue(job(14)))
    event, _wake = pool.due(T0 + 81)
    assert event is not None and event["jobs"] == [14]


def test_a_failed_poll_forgets_the_queue() -> None:
    pool = watch(node("int01", LONG_IDLE))
    pool.take_queue(queue(job(11)))
    assert pool.due(T0)[0] is not None
    pool.take_queue(None)
    assert pool.due(T0 + 30) == (None, None)
    pool.take_queue(queue(job(11)))
    event, _wake = pool.due(T0 + 40)
    assert event is not None and event["jobs"] == [11]  # announced afresh, at once


def test_nothing_is_announced_while_another_run_holds_the_lease() -> None:
    pool = watch(node("int01", LONG_IDLE))
    pool.apply(WatchedKind.LEASE, "ADDED", lease("timer-run", renewed=T0 - 10, duration=60))
    pool.take_queue(queue(job(11)))
    assert pool.due(T0) == (None, T0 + 50)
    pool.apply(WatchedKind.LEASE, "MODIFIED", lease("", renewed=T0 + 5))
    event, _wake = pool.due(T0 + 6)
    assert event is not None and event["trigger"] == Trigger.SLURM_DEMAND


def test_waiting_notebooks_go_first_and_slurms_jobs_right_after() -> None:
    # Two idle nodes, one notebook waiting: a run reclaims nothing (a node is free) but the
    # demand is announced first; Slurm's job at the next look, at once.
    pool = watch(node("int01", LONG_IDLE), node("int02", IDLE), pods=[waiting_pod("nb")])
    pool.take_queue(queue(job(11)))
    first, wake = pool.due(T0)
    assert first is not None and first["trigger"] == Trigger.DEMAND
    assert wake == T0
    second, _wake = pool.due(T0)
    assert second is not None and second["trigger"] == Trigger.SLURM_DEMAND
    assert second["nodes"] == ["int01"]  # one node stays for the notebook


def test_with_lend_when_idle_slurms_queue_announces_nothing() -> None:
    idle_policy = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=600, lend_when="idle")
    pool = watch(node("int01", LONG_IDLE), policy=idle_policy)
    pool.take_queue(queue(job(11)))
    event, _wake = pool.due(T0)
    assert event is not None and event["trigger"] == Trigger.IDLE  # as before: lendable
    assert pool.due(T0 + 100) == (None, None)


def test_with_lend_when_demand_idle_nodes_alone_are_announced_only_to_be_recorded() -> None:
    pool = watch(node("int01", LONG_IDLE), node("int02"))
    event, wake = pool.due(T0)
    assert event is not None and event["trigger"] == Trigger.IDLE
    assert event["nodes"] == ["int02"]  # no idle_since yet; int01's is recorded
    assert wake is None
    pool.apply(WatchedKind.NODE, "MODIFIED", node("int02", {"state": "free", "idle_since": T0}))
    # Lendable by the clock later, but idle alone never starts a lend: no wake for it.
    assert pool.due(T0 + 1) == (None, None)
    assert pool.due(T0 + 3600) == (None, None)


def test_a_repeat_waits_for_a_queue_read_begun_after_the_last_run_ended() -> None:
    pool = watch(node("int01", LONG_IDLE), node("int02", IDLE))
    pool.take_queue(queue(job(11)), read_at=T0)
    assert pool.due(T0)[0] is not None
    # The rulebook's run takes the Lease and lends int01; the polls during the run still
    # show the job pending (slurmctld starts it once the node has registered).
    pool.apply(WatchedKind.LEASE, "ADDED", lease("events-run", renewed=T0 + 1))
    pool.take_queue(queue(job(11)), read_at=T0 + 15)
    assert pool.due(T0 + 16)[0] is None
    pool.apply(WatchedKind.LEASE, "DELETED", lease("events-run", renewed=T0 + 1))
    # Released at T0 + 40, past the repeat: the read of T0 + 15 is older than the run's
    # end, so nothing yet (the job may run by now), and no wake: the next read looks.
    assert pool.due(T0 + 40) == (None, None)
    pool.take_queue(queue(), read_at=T0 + 41)  # it runs: nothing more
    assert pool.due(T0 + 41) == (None, None)
    # Had it still waited, the next read would have repeated the event at once.
    pool.take_queue(queue(job(11)), read_at=T0 + 43)
    event, _wake = pool.due(T0 + 43)
    assert event is not None and event["jobs"] == [11]


def test_a_new_job_is_announced_on_a_read_begun_before_the_run_ended() -> None:
    pool = watch(node("int01", LONG_IDLE), node("int02", IDLE))
    pool.take_queue(queue(job(11)), read_at=T0)
    assert pool.due(T0)[0] is not None
    pool.apply(WatchedKind.LEASE, "ADDED", lease("events-run", renewed=T0 + 1))
    assert pool.due(T0 + 2)[0] is None
    pool.apply(WatchedKind.LEASE, "DELETED", lease("events-run", renewed=T0 + 1))
    assert pool.due(T0 + 20) == (None, None)
    # Job 12 came during the run, after its plan had read the queue.
    pool.take_queue(queue(job(11), job(12)), read_at=T0 + 19)
    event, _wake = pool.due(T0 + 21)
    assert event is not None and event["jobs"] == [11, 12]
