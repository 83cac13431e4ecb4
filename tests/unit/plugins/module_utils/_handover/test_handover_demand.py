# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's demand for the pool (lend_when: demand): which pending jobs a lent node would
start, where they go, and what the planner lends or gives back for them."""

from __future__ import annotations

import json
import math
import typing as t

import pytest
from fake_slurmrestd import FakeSlurmRestd, recording
from hypothesis import given, settings
from hypothesis import strategies as st
from test_handover_plan import app_pod

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    LendablePartition,
    PendingJob,
    Placement,
    Shape,
    SlurmdLimits,
    SlurmQueue,
    demand_blocker,
    pending_job,
    place,
    registered_shape,
    slurmd_limits,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    Journal,
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
    lend_blocker,
    plan,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import (
    RUNNING_JOB_FIELDS,
    read_slurm_jobs,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
    normalize_job,
    normalize_node,
)

NOW = 1_800_000_000.0
POOL = {"hpcops.io/pool": "interactive"}
NEVER = {"hpcops.io/never-touch": "true"}
MIB = 1024**2
GIB = 1024**3
NODE = Shape(32000, 256 * GIB)  # a pool node: 32 CPUs, 256 GiB
GPU_NODE = Shape(32000, 256 * GIB, 4)

# The recorded pending job of the 26.05 lab (v0.0.45), as slurm_info normalises it.
RECORDED_PENDING = next(
    normalize_job(raw)
    for raw in recording("26.05", "v0.0.45", "jobs")[1]["jobs"]
    if raw["job_state"] == ["PENDING"]
)


def job(job_id: int, **changes: t.Any) -> dict[str, t.Any]:
    """A pending job of the lendable partition backfill, as the 26.05 lab shows one waiting
    for its first lent node: reason PartitionConfig, 240 minutes (backfill's MaxTime), one
    CPU with DefMemPerCPU 8192 MiB."""
    return {
        **RECORDED_PENDING,
        "job_id": job_id,
        "name": f"job{job_id}",
        "state_reason": "PartitionConfig",
        "hold": False,
        "priority": 1,
        "partition": "backfill",
        "time_limit": 240,
        "node_count": 1,
        "cpus": 1,
        "cpus_per_node": 1,
        "memory_per_node": None,
        "memory_per_cpu": 8192,
        "tres_per_node": "",
        "tres_requested": "cpu=1,mem=8G,node=1,billing=1",
        "shared": [],
        **changes,
    }


def cpus(count: int) -> dict[str, t.Any]:
    """What a job of `count` CPUs on one node shows (memory from DefMemPerCPU)."""
    return {
        "cpus": count,
        "cpus_per_node": count,
        "tres_requested": f"cpu={count},mem={count * 8}G,node=1,billing={count}",
    }


EXCLUSIVE = {"shared": ["none"]}
BACKFILL = LendablePartition("backfill", max_time_s=240 * 60.0)
PARTITIONS = {"backfill": BACKFILL}
DEMAND = Policy(pool_selector=POOL, never_touch_selector=NEVER, headroom=0, lend_when="demand")


def queue(*jobs: dict[str, t.Any]) -> SlurmQueue:
    return SlurmQueue(tuple(pending_job(j) for j in jobs), PARTITIONS)


def pending(**fields: t.Any) -> PendingJob:
    return PendingJob(job_id=7, partitions=("backfill",), per_node=Shape(1000, 8 * GIB), **fields)


# ---- pending_job: what a normalised job asks of each node ------------------------------


def test_the_recorded_held_job_of_the_lab() -> None:
    assert pending_job(RECORDED_PENDING) == PendingJob(
        job_id=2,
        partitions=("backfill",),
        nodes=1,
        per_node=Shape(1000, 256 * MIB, 0),
        exclusive=False,
        time_limit_s=14400.0,
        requeue=True,
        held=True,
        dependency="",
        reason="JobHeldUser",
        priority=0,
    )


def test_an_exclusive_job_of_64_cpus_asks_512_gib_of_its_node() -> None:
    lab = job(
        11,
        cpus=64,
        cpus_per_node=64,
        shared=["none"],
        tres_requested="cpu=64,mem=512G,node=1,billing=64",
        priority=4294,
    )
    assert pending_job(lab) == PendingJob(
        job_id=11,
        partitions=("backfill",),
        nodes=1,
        per_node=Shape(64000, 512 * GIB, 0),
        exclusive=True,
        time_limit_s=14400.0,
        requeue=True,
        held=False,
        dependency="",
        reason="PartitionConfig",
        priority=4294,
    )


def test_a_two_node_job_asks_per_node() -> None:
    """The lab's 2-node job: node_count 2, cpus 2, cpus_per_node 1, DefMemPerCPU 8192."""
    two = pending_job(
        job(12, node_count=2, cpus=2, tres_requested="cpu=2,mem=16G,node=2,billing=2")
    )
    assert (two.nodes, two.per_node) == (2, Shape(1000, 8192 * MIB, 0))


def test_cpus_per_node_missing_is_the_cpus_spread_over_the_nodes() -> None:
    spread = pending_job(job(13, node_count=2, cpus=9, cpus_per_node=None))
    assert (spread.nodes, spread.per_node) == (2, Shape(5000, 5 * 8192 * MIB, 0))


def test_memory_per_node_comes_before_memory_per_cpu() -> None:
    per_node = pending_job(job(14, **cpus(4), memory_per_node=20000, memory_per_cpu=None))
    assert per_node.per_node == Shape(4000, 20000 * MIB, 0)
    neither = pending_job(job(15, memory_per_node=None, memory_per_cpu=None))
    assert neither.per_node == Shape(1000, 0, 0)


@pytest.mark.parametrize(
    ("fields", "gpus"),
    [
        ({"tres_per_node": "gres/gpu:2"}, 2),  # --gres=gpu:2, as the lab shows it
        ({"tres_per_node": "gres/gpu:a100:3"}, 3),  # a typed GPU
        ({"tres_per_node": "gres/gpu=1"}, 1),
        # --gpus=4 over two nodes: only the job's total is known.
        (
            {"node_count": 2, "cpus": 2, "tres_requested": "cpu=2,mem=16G,node=2,gres/gpu=4"},
            2,
        ),
        ({"tres_requested": "cpu=1,mem=8G,node=1,billing=1"}, 0),
    ],
)
def test_gpus_per_node(fields: dict[str, t.Any], gpus: int) -> None:
    assert pending_job(job(16, **fields)).per_node.gpus == gpus


@pytest.mark.parametrize(
    ("time_limit", "seconds"), [(240, 14400.0), (1, 60.0), ("infinite", math.inf), (None, None)]
)
def test_time_limit_minutes_become_seconds(time_limit: t.Any, seconds: float | None) -> None:
    assert pending_job(job(17, time_limit=time_limit)).time_limit_s == seconds


def test_a_job_may_name_several_partitions() -> None:
    assert pending_job(job(18, partition="batch,backfill")).partitions == ("batch", "backfill")


@pytest.mark.parametrize(
    ("fields", "held"),
    [
        ({"hold": True, "state_reason": "JobHeldUser"}, True),
        ({"hold": False, "state_reason": "JobHeldAdmin"}, True),
        ({"hold": False, "state_reason": "Resources"}, False),
    ],
)
def test_held(fields: dict[str, t.Any], held: bool) -> None:
    assert pending_job(job(19, **fields)).held is held


# ---- demand_blocker: why a lent node would not start a job -----------------------------


@pytest.mark.parametrize(
    ("fields", "blocker"),
    [
        ({"hold": True, "state_reason": "JobHeldUser"}, "held"),
        ({"dependency": "afterok:12", "state_reason": "Dependency"}, "waits on a dependency"),
        ({"state_reason": "DependencyNeverSatisfied"}, "waits on a dependency"),
        ({"state_reason": "BeginTime"}, "waits for its begin time"),
        (
            {"state_reason": "QOSMaxJobsPerUserLimit"},
            "pending for QOSMaxJobsPerUserLimit, which a lent node does not change",
        ),
        ({"time_limit": 300}, "time limit over backfill's MaxTime"),
        ({"time_limit": "infinite"}, "time limit over backfill's MaxTime"),
        (
            {"requeue": False},
            "time limit over the 300 s grace, and not requeue-able",
        ),
        (
            cpus(33),
            "asks more than a pool node has: CPUs 33 > 32, memory 270336 MiB > 262144 MiB",
        ),
        (
            {**cpus(33), "memory_per_cpu": 1024},
            "asks more than a pool node has: CPUs 33 > 32",
        ),
        ({"tres_per_node": "gres/gpu:2"}, "asks more than a pool node has: GPUs 2 > 0"),
        # slurmctld holds a job too big for the partition's nodes (priority 0): reported
        # with what it exceeds, not as held.
        (
            {**cpus(64), "memory_per_cpu": 1024, "state_reason": "BadConstraints", "hold": True},
            "asks more than a pool node has: CPUs 64 > 32",
        ),
        # Too big for what Slurm has, though not in numbers the plan can see (a feature,
        # a lent node registered smaller): Slurm's word.
        (
            {"state_reason": "BadConstraints", "hold": True, "priority": 0},
            "asks more than a pool node has (Slurm: BadConstraints)",
        ),
        # The lab's jobs that a lent node starts.
        ({"state_reason": "PartitionConfig"}, None),
        ({"state_reason": "Resources"}, None),
        ({"state_reason": "Priority"}, None),
        ({"state_reason": "None"}, None),
        ({"state_reason": "ReqNodeNotAvail, UnavailableNodes:int[01-02]"}, None),
        ({**cpus(32), **EXCLUSIVE}, None),
        ({"requeue": False, "time_limit": 5}, None),  # within the 300 s grace
    ],
)
def test_demand_blocker(fields: dict[str, t.Any], blocker: str | None) -> None:
    found = demand_blocker(pending_job(job(20, **fields)), BACKFILL, DEMAND, [NODE])
    assert found == blocker


def test_the_blockers_come_in_order() -> None:
    """A held job with a dependency and a limit over MaxTime is held first."""
    everything = pending_job(
        job(21, hold=True, dependency="afterok:1", state_reason="JobHeldUser", time_limit=999)
    )
    assert demand_blocker(everything, BACKFILL, DEMAND, [NODE]) == "held"


def test_over_grace_with_escalation_cancel() -> None:
    policy = Policy(
        pool_selector=POOL, partitions={"backfill": PartitionPolicy(600, "cancel")}, headroom=0
    )
    long = pending_job(job(22, time_limit=240))
    assert demand_blocker(long, BACKFILL, policy, [NODE]) == (
        "time limit over the 600 s grace of backfill, whose escalation is cancel"
    )
    short = pending_job(job(23, time_limit=10))  # 600 s: within the grace
    assert demand_blocker(short, BACKFILL, policy, [NODE]) is None
    waits = Policy(pool_selector=POOL, partitions={"backfill": PartitionPolicy(60, "wait")})
    assert demand_blocker(long, BACKFILL, waits, [NODE]) == (
        "time limit over the 60 s grace of backfill, whose escalation is wait"
    )


def test_no_time_limit_takes_the_partitions_default_then_its_max() -> None:
    none = pending_job(job(24, time_limit=None, requeue=False))
    short_default = LendablePartition("backfill", max_time_s=14400.0, default_time_s=240.0)
    assert demand_blocker(none, short_default, DEMAND, [NODE]) is None
    assert demand_blocker(none, BACKFILL, DEMAND, [NODE]) == (
        "time limit over the 300 s grace, and not requeue-able"
    )
    # No limit anywhere: it runs forever, which a requeue at the deadline still allows.
    unlimited = LendablePartition("backfill")
    assert demand_blocker(pending_job(job(25, time_limit=None)), unlimited, DEMAND, [NODE]) is None


def test_a_gpu_job_fits_a_pool_with_a_gpu_node() -> None:
    gpu = pending_job(job(26, tres_per_node="gres/gpu:2"))
    assert demand_blocker(gpu, BACKFILL, DEMAND, [NODE, GPU_NODE]) is None
    assert demand_blocker(gpu, BACKFILL, DEMAND, [Shape(32000, 256 * GIB, 1)]) == (
        "asks more than a pool node has: GPUs 2 > 1"
    )
    # Several shapes, none holds it: named against the one that comes closest (the
    # fewest resources short; of those, the largest).
    big = pending_job(job(27, **cpus(48), memory_per_cpu=1024, tres_per_node="gres/gpu:2"))
    assert demand_blocker(big, BACKFILL, DEMAND, [GPU_NODE, Shape(16000, 8 * GIB)]) == (
        "asks more than a pool node has: CPUs 48 > 32"
    )
    assert demand_blocker(big, BACKFILL, DEMAND, [GPU_NODE, Shape(64000, 256 * GIB)]) == (
        "asks more than a pool node has: GPUs 2 > 0"
    )
    assert demand_blocker(big, BACKFILL, DEMAND, []) == (
        "asks more than a pool node has: the pool has no node"
    )


# ---- what Slurm has of a lent node: its record, or slurmd's limits ------------------------

LEND = {"hpcops.io/slurm-lent": "true"}


def nodeset(
    slurmd: dict[str, t.Any] | None = None,
    pod: dict[str, t.Any] | None = None,
    extra_conf: str = "Features=interactive",
) -> dict[str, t.Any]:
    """A lendable NodeSet as the slurm chart 1.2.1 renders one from slurm_cluster_pools."""
    return {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": "slurm-worker-interactive", "namespace": "slurm"},
        "spec": {
            "extraConf": extra_conf,
            "slurmd": {"image": "ghcr.io/slinkyproject/slurmd:26.05", "resources": slurmd or {}},
            "template": {
                "spec": {
                    "hostname": "interactive-",
                    "nodeSelector": {"kubernetes.io/os": "linux", **POOL, **LEND},
                    **({"resources": pod} if pod is not None else {}),
                }
            },
        },
    }


def test_slurmd_limits_are_the_slurmd_containers_else_the_pods() -> None:
    limited = slurmd_limits(
        nodeset({"limits": {"cpu": "8", "memory": "16Gi"}}), "interactive", LEND
    )
    assert limited == SlurmdLimits(
        "interactive", {"kubernetes.io/os": "linux", **POOL}, cpus=8, memory_mib=16384
    )
    # The pod-level limit where the container has none; the container's wins per resource.
    mixed = slurmd_limits(
        nodeset({"limits": {"memory": "1000Mi"}}, {"limits": {"cpu": "4", "memory": "8Gi"}}),
        "interactive",
        LEND,
    )
    assert (mixed.cpus, mixed.memory_mib) == (4, 1000)
    # POD_CPUS rounds a fraction up (Quantity.Value()), POD_MEMORY down to whole MiB.
    odd = slurmd_limits(
        nodeset({"limits": {"cpu": "1500m", "memory": "1537Ki"}}), "interactive", LEND
    )
    assert (odd.cpus, odd.memory_mib) == (2, 1)
    # No limit: slurmd takes what it detects; no Gres in its --conf: GPUs not named.
    assert slurmd_limits(nodeset(), "interactive", LEND) == SlurmdLimits(
        "interactive", {"kubernetes.io/os": "linux", **POOL}
    )
    gpus = slurmd_limits(nodeset(extra_conf="Features=h100 Gres=gpu:h100:4"), "h100", LEND)
    assert gpus.gpus == 4


def test_slurms_record_of_a_node_is_what_jobs_may_use() -> None:
    recorded = normalize_node(recording("26.05", "v0.0.45", "nodes")[1]["nodes"][0])
    assert registered_shape(recorded) == Shape(2000, 4096 * MIB, 0)
    # Slinky's entrypoint reserved the rest of a 64-CPU, 512 GiB host (CoreSpecCount,
    # MemSpecLimit): jobs get 16 CPUs and 64 GiB, and the GPUs of its Gres.
    reserved = {
        **recorded,
        "cpus": 64,
        "effective_cpus": 16,
        "real_memory": 512 * 1024,
        "specialized_memory": 448 * 1024,
        "gres": "gpu:h100:4(S:0-1),shard:8",
    }
    assert registered_shape(reserved) == Shape(16000, 64 * GIB, 4)
    # Older answers without effective_cpus: its CPUs. Not registered yet: nothing known.
    assert registered_shape({**reserved, "effective_cpus": None}) == Shape(64000, 64 * GIB, 4)
    assert registered_shape({**recorded, "cpus": None, "effective_cpus": None}) is None


def test_a_node_offers_slurms_record_once_lent_else_the_limits_within_its_allocatable() -> None:
    small = SlurmdLimits("interactive", POOL, cpus=8, memory_mib=16384)
    big = SlurmdLimits("interactive", POOL, cpus=64, memory_mib=1024 * 1024, gpus=8)
    record = Shape(48000, 128 * GIB, 0)
    slurm_side = SlurmQueue(registered={"int01": record}, slurmd=(small,))
    assert slurm_side.offer("int01", POOL, NODE, lent=True) == record
    # A free node (a record left from an earlier loan does not count): slurmd's limits.
    assert slurm_side.offer("int01", POOL, NODE, lent=False) == Shape(8000, 16 * GIB, 0)
    assert slurm_side.offer("int02", POOL, NODE, lent=True) == Shape(8000, 16 * GIB, 0)
    # Limits beyond the node: the node's allocatable.
    assert SlurmQueue(slurmd=(big,)).offer("int02", POOL, GPU_NODE, lent=False) == GPU_NODE
    # Several NodeSets select it: the smallest; none, or none known: the allocatable.
    both = SlurmQueue(slurmd=(big, small))
    assert both.offer("int02", POOL, NODE, lent=False) == Shape(8000, 16 * GIB, 0)
    assert both.offer("svc01", {"hpcops.io/pool": "services"}, NODE, lent=False) == NODE
    assert SlurmQueue().offer("int02", POOL, NODE, lent=False) == NODE
    # A node of 24684092Ki (24105.55 MiB) is reported as slurmd registers it, 24105 MiB, and a
    # job asks whole MiB, so what fits is the same in bytes or in whole MiB.
    odd = Shape(2000, 24684092 * 1024, 0)
    assert odd.describe() == "2 CPUs, 24105 MiB"
    assert odd.holds(Shape(1000, 24105 * MIB)) and not odd.holds(Shape(1000, 24106 * MIB))


# ---- place: which free nodes the fitting jobs need --------------------------------------


def placed(
    jobs: list[dict[str, t.Any]],
    free: list[tuple[str, Shape]],
    *,
    room: int = 10,
    idle_lent: list[tuple[str, Shape]] | None = None,
    policy: Policy = DEMAND,
) -> Placement:
    lent = idle_lent or []
    shapes = [shape for _name, shape in [*free, *lent]]
    return place([pending_job(j) for j in jobs], PARTITIONS, policy, shapes, lent, free, room)


FOUR_FREE = [(f"int{i:02d}", NODE) for i in range(1, 5)]


def test_two_small_jobs_share_one_node() -> None:
    result = placed([job(1, **cpus(16)), job(2, **cpus(16))], FOUR_FREE)
    assert result.lend == ["int01"]
    assert result.jobs_for == {"int01": [1, 2]}
    assert (result.pending, result.fitting, result.unplaced, result.used_lent) == (2, 2, [], set())


def test_a_third_small_job_opens_a_second_node() -> None:
    result = placed([job(1, **cpus(16)), job(2, **cpus(16)), job(3, **cpus(1))], FOUR_FREE)
    assert result.lend == ["int01", "int02"]
    assert result.jobs_for == {"int01": [1, 2], "int02": [3]}


def test_memory_fills_a_node_too() -> None:
    """Two 1-CPU jobs of 200 GiB each: one per 256 GiB node."""
    big = {"memory_per_node": 200 * 1024, "memory_per_cpu": None}
    result = placed([job(1, **big), job(2, **big)], FOUR_FREE)
    assert result.lend == ["int01", "int02"]


def test_two_exclusive_jobs_take_two_nodes() -> None:
    result = placed([job(1, **EXCLUSIVE), job(2, **EXCLUSIVE)], FOUR_FREE)
    assert result.lend == ["int01", "int02"]
    assert result.jobs_for == {"int01": [1], "int02": [2]}


def test_an_exclusive_job_does_not_join_a_used_node() -> None:
    result = placed([job(1, **cpus(1), priority=9), job(2, **EXCLUSIVE)], FOUR_FREE)
    assert result.jobs_for == {"int01": [1], "int02": [2]}


def test_a_two_node_job_with_room_for_one_takes_none() -> None:
    two = job(1, node_count=2, cpus=2, cpus_per_node=1)
    result = placed([two], FOUR_FREE, room=1)
    assert (result.lend, result.jobs_for, result.unplaced) == ([], {}, [1])
    assert result.as_dict()["unplaced_jobs"] == [1]
    assert result.as_dict()["unplaced_count"] == 1
    # With room for both it takes two nodes.
    assert placed([two], FOUR_FREE, room=2).jobs_for == {"int01": [1], "int02": [1]}


def test_an_idle_lent_node_takes_the_job_first() -> None:
    result = placed([job(1)], FOUR_FREE, idle_lent=[("int09", NODE)])
    assert result.lend == []
    assert result.used_lent == {"int09"}
    assert result.jobs_for == {"int09": [1]}
    assert result.as_dict()["lent_nodes_used"] == ["int09"]


def test_what_the_lent_node_cannot_take_goes_to_a_free_one() -> None:
    result = placed(
        [job(1, **EXCLUSIVE, priority=5), job(2, **EXCLUSIVE)],
        FOUR_FREE,
        idle_lent=[("int09", NODE)],
    )
    assert result.jobs_for == {"int09": [1], "int01": [2]}
    assert (result.lend, result.used_lent) == (["int01"], {"int09"})


def test_a_gpu_job_goes_to_the_gpu_node_only() -> None:
    free = [("int01", NODE), ("gpu01", GPU_NODE), ("int02", NODE)]
    result = placed([job(1, tres_per_node="gres/gpu:2")], free)
    assert result.lend == ["gpu01"]
    # A second one of two GPUs fits beside it; a third waits: no other node has GPUs.
    three = placed([job(i, tres_per_node="gres/gpu:2") for i in (1, 2, 3)], free)
    assert three.jobs_for == {"gpu01": [1, 2]}
    assert (three.lend, three.unplaced) == (["gpu01"], [3])


def test_free_nodes_are_taken_in_the_order_given() -> None:
    """The planner gives them longest idle first."""
    free = [("int03", NODE), ("int01", NODE), ("int02", NODE)]
    result = placed([job(1, **EXCLUSIVE), job(2, **EXCLUSIVE)], free)
    assert result.lend == ["int03", "int01"]


def test_jobs_are_placed_by_priority_then_age() -> None:
    jobs = [
        job(1, **EXCLUSIVE, priority=5),
        job(2, **EXCLUSIVE, priority=10),
        job(3, **EXCLUSIVE, priority=5),
    ]
    result = placed(jobs, FOUR_FREE, room=2)
    assert result.jobs_for == {"int01": [2], "int02": [1]}
    assert result.unplaced == [3]


def test_jobs_of_other_partitions_are_not_demand_and_skipped_ones_are_counted() -> None:
    jobs = [
        job(1, partition="batch"),  # not lendable: not counted at all
        job(2, partition="batch,backfill"),  # may run in backfill: counted and placed
        job(3, hold=True, state_reason="JobHeldUser"),
        job(4, hold=True, state_reason="JobHeldUser"),
        job(5, state_reason="QOSMaxJobsPerUserLimit"),
        job(6, hold=True, state_reason="JobHeldAdmin"),
        job(7, hold=True, state_reason="JobHeldUser"),
        job(8, hold=True, state_reason="JobHeldUser"),
    ]
    result = placed(jobs, FOUR_FREE)
    assert result.as_dict() == {
        "pending_jobs": 7,
        "fitting_jobs": 1,
        "nodes": 1,
        "lent_nodes_used": [],
        "unplaced_jobs": [],
        "unplaced_count": 0,
        "skipped": [
            {"reason": "held", "jobs": 5, "examples": [3, 4, 6]},
            {
                "reason": "pending for QOSMaxJobsPerUserLimit, which a lent node does not change",
                "jobs": 1,
                "examples": [5],
            },
        ],
    }
    assert result.jobs_for == {"int01": [2]}


def test_a_job_fits_when_any_of_its_lendable_partitions_takes_it() -> None:
    partitions = {
        "short": LendablePartition("short", max_time_s=3600.0),
        "backfill": BACKFILL,
    }
    long = pending_job(job(1, partition="short,backfill", time_limit=240))
    result = place([long], partitions, DEMAND, [NODE], [], FOUR_FREE, 10)
    assert (result.fitting, result.lend) == (1, ["int01"])
    only_short = pending_job(job(2, partition="short", time_limit=240))
    result = place([only_short], partitions, DEMAND, [NODE], [], FOUR_FREE, 10)
    assert (result.fitting, result.lend) == (0, [])
    assert result.as_dict()["skipped"] == [
        {"reason": "time limit over short's MaxTime", "jobs": 1, "examples": [2]}
    ]


def test_room_zero_lends_nothing() -> None:
    result = placed([job(1)], FOUR_FREE, room=0)
    assert (result.lend, result.unplaced) == ([], [1])


# ---- plan with lend_when: demand --------------------------------------------------------


def node(
    name: str,
    state: str = "free",
    *,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    **journal: float,
) -> NodeView:
    """A pool node; a free one idle for an hour unless the journal says otherwise."""
    if state == "free":
        journal = {"idle_since": NOW - 3600, **journal}
    text = json.dumps({"state": state, "op": "op1", **journal})
    return NodeView(
        name=name,
        labels=POOL if labels is None else labels,
        journal=Journal.parse(text),
        cpu_m=32000,
        memory_b=256 * GIB,
        gpus=gpus,
    )


def idle(name: str, idle_s: float) -> SlurmNodeView:
    """A lent node idle in Slurm, its last job ended idle_s ago."""
    return SlurmNodeView(name, frozenset({"IDLE"}), last_busy=NOW - idle_s)


def names(decisions: tuple[t.Any, ...]) -> list[str]:
    return [d.node for d in decisions]


def reasons(decisions: tuple[t.Any, ...]) -> dict[str, str]:
    return {d.node: d.reason for d in decisions}


FREE = [node(f"int{i:02d}") for i in range(1, 6)]


def test_an_empty_queue_lends_nothing() -> None:
    result = plan(FREE, [], {}, DEMAND, NOW, SlurmQueue((), PARTITIONS))
    assert (result.lend, result.reclaim) == ((), ())
    assert reasons(result.left_alone) == {
        n.name: "free; no job waiting in Slurm needs it" for n in FREE
    }
    assert result.as_dict()["slurm_demand"] == {
        "pending_jobs": 0,
        "fitting_jobs": 0,
        "nodes": 0,
        "lent_nodes_used": [],
        "unplaced_jobs": [],
        "unplaced_count": 0,
        "skipped": [],
    }


def test_the_idle_mode_lends_the_same_nodes_with_or_without_a_queue() -> None:
    idle_policy = Policy(pool_selector=POOL, never_touch_selector=NEVER, headroom=1)
    with_queue = plan(FREE, [], {}, idle_policy, NOW, queue(job(1)))
    assert names(with_queue.lend) == ["int01", "int02", "int03", "int04"]
    assert with_queue.slurm_demand is None
    assert with_queue == plan(FREE, [], {}, idle_policy, NOW)


def test_nothing_that_fits_lends_nothing() -> None:
    jobs = queue(
        job(1, hold=True, state_reason="JobHeldUser"),
        job(2, **cpus(64)),
        job(3, time_limit=600),
    )
    result = plan(FREE, [], {}, DEMAND, NOW, jobs)
    assert result.lend == ()
    assert set(reasons(result.left_alone).values()) == {"free; no job waiting in Slurm needs it"}
    demand = result.as_dict()["slurm_demand"]
    assert (demand["pending_jobs"], demand["fitting_jobs"], demand["nodes"]) == (3, 0, 0)
    assert demand["skipped"] == [
        {
            "reason": "asks more than a pool node has: CPUs 64 > 32, memory 524288 MiB > 262144 MiB",
            "jobs": 1,
            "examples": [2],
        },
        {"reason": "held", "jobs": 1, "examples": [1]},
        {"reason": "time limit over backfill's MaxTime", "jobs": 1, "examples": [3]},
    ]


def test_lends_exactly_what_the_jobs_need_longest_idle_first() -> None:
    nodes = [
        node("int01", idle_since=NOW - 1000),
        node("int02", idle_since=NOW - 5000),
        node("int03", idle_since=NOW - 3000),
        node("int04", idle_since=NOW - 9000),
    ]
    jobs = queue(job(11, **EXCLUSIVE), job(12, **cpus(16)), job(13, **cpus(16)))
    result = plan(nodes, [], {}, DEMAND, NOW, jobs)
    # Priority ties: the oldest job first; the exclusive one takes int04 (idle longest).
    assert [(d.node, d.reason) for d in result.lend] == [
        ("int04", "for pending job(s) 11 of Slurm"),
        ("int02", "for pending job(s) 12, 13 of Slurm"),
    ]
    assert reasons(result.left_alone) == {
        "int01": "free; no job waiting in Slurm needs it",
        "int03": "free; no job waiting in Slurm needs it",
    }
    assert result.reclaim == ()
    assert result.slurm_demand is not None
    assert (result.slurm_demand["fitting_jobs"], result.slurm_demand["nodes"]) == (3, 2)


def test_a_node_not_idle_long_enough_is_not_lent_for_a_job() -> None:
    policy = Policy(pool_selector=POOL, headroom=0, lend_when="demand", lend_min_idle_s=600)
    nodes = [node("int01", idle_since=NOW - 100), node("int02", idle_since=NOW - 700)]
    result = plan(nodes, [], {}, policy, NOW, queue(job(1, **EXCLUSIVE), job(2, **EXCLUSIVE)))
    assert [(d.node, d.reason) for d in result.lend] == [("int02", "for pending job(s) 1 of Slurm")]
    assert reasons(result.left_alone) == {
        "int01": "idle for 100 s of the 600 s lend_min_idle_s",
    }
    assert result.slurm_demand is not None
    assert result.slurm_demand["unplaced_jobs"] == [2]


def test_the_application_headroom_is_kept_free() -> None:
    policy = Policy(pool_selector=POOL, headroom=2, lend_when="demand")
    jobs = queue(*(job(i, **EXCLUSIVE) for i in range(1, 6)))
    result = plan(FREE, [], {}, policy, NOW, jobs)
    assert names(result.lend) == ["int01", "int02", "int03"]
    assert reasons(result.left_alone) == {
        "int04": "kept free: job(s) 4, 5 need more nodes than this run can lend",
        "int05": "kept free: job(s) 4, 5 need more nodes than this run can lend",
    }


def test_a_gpu_job_is_lent_the_gpu_node() -> None:
    nodes = [node("int01", idle_since=NOW - 9000), node("gpu01", gpus=4)]
    result = plan(nodes, [], {}, DEMAND, NOW, queue(job(5, tres_per_node="gres/gpu:2")))
    assert [(d.node, d.reason) for d in result.lend] == [("gpu01", "for pending job(s) 5 of Slurm")]


def limited(*jobs: dict[str, t.Any], **slurm_side: t.Any) -> SlurmQueue:
    """A queue of `jobs` with what Slurm has of the pool's nodes (SlurmQueue's fields)."""
    return SlurmQueue(tuple(pending_job(j) for j in jobs), PARTITIONS, **slurm_side)


EIGHT_CPUS = SlurmdLimits("interactive", POOL, cpus=8, memory_mib=64 * 1024)


def test_a_job_that_fits_the_allocatable_but_not_slurmds_limits_is_not_lent_for() -> None:
    """The pool's Nodes have 32 CPUs and 256 GiB allocatable; the lendable NodeSet's
    slurmd is limited to 8 CPUs and 64 GiB, which is all Slurm will get of a lent node."""
    between = job(1, **cpus(16), memory_per_cpu=1024)
    heavy = job(2, memory_per_node=100 * 1024, memory_per_cpu=None)
    result = plan(FREE, [], {}, DEMAND, NOW, limited(between, heavy, slurmd=(EIGHT_CPUS,)))
    assert result.lend == ()
    assert result.slurm_demand is not None
    assert result.slurm_demand["skipped"] == [
        {"reason": "asks more than a pool node has: CPUs 16 > 8", "jobs": 1, "examples": [1]},
        {
            "reason": "asks more than a pool node has: memory 102400 MiB > 65536 MiB",
            "jobs": 1,
            "examples": [2],
        },
    ]
    # Without the limits (the allocatable alone) both would have been lent for.
    assert names(plan(FREE, [], {}, DEMAND, NOW, queue(between, heavy)).lend) == ["int01"]
    # What fits the limits is lent for, placed by the limits: two 4-CPU jobs per node.
    small = [job(i, **cpus(4), memory_per_cpu=1024) for i in (3, 4, 5)]
    result = plan(FREE, [], {}, DEMAND, NOW, limited(*small, slurmd=(EIGHT_CPUS,)))
    assert [(d.node, d.reason) for d in result.lend] == [
        ("int01", "for pending job(s) 3, 4 of Slurm"),
        ("int02", "for pending job(s) 5 of Slurm"),
    ]


def test_a_job_that_fits_slurms_record_of_a_lent_node_but_not_the_allocatable_uses_it() -> None:
    """The reverse: slurmd of the lent int09 registered 64 CPUs (what it detected), more
    than the 32 its Node has allocatable. A 48-CPU job fits there, and Slurm starts it."""
    nodes = [*FREE, node("int09", "lent", since=NOW - 7200)]
    slurm = {"int09": idle("int09", 7000)}
    wide = job(1, **cpus(48), memory_per_cpu=1024)
    record = {"int09": Shape(64000, 256 * GIB)}
    result = plan(nodes, [], slurm, DEMAND, NOW, limited(wide, registered=record))
    assert (result.lend, result.reclaim) == ((), ())
    assert result.slurm_demand is not None
    assert result.slurm_demand["lent_nodes_used"] == ["int09"]
    assert reasons(result.left_alone)["int09"] == "lent; a waiting job will run there"
    # slurmd limits beyond the Node's allocatable give a free node no more than it has.
    roomy = SlurmdLimits("interactive", POOL, cpus=64)
    result = plan(FREE, [], {}, DEMAND, NOW, limited(wide, slurmd=(roomy,)))
    assert result.lend == ()
    assert result.slurm_demand is not None
    assert result.slurm_demand["skipped"][0]["reason"] == (
        "asks more than a pool node has: CPUs 48 > 32"
    )


def test_a_job_slurm_holds_for_bad_constraints_is_reported_as_too_big_not_held() -> None:
    """Lent int09 registered 8 CPUs: slurmctld marks a 16-CPU job BadConstraints and sets
    its priority to 0 (slurmrestd: hold). The plan names what it exceeds, and lends
    nothing for it."""
    nodes = [*FREE, node("int09", "lent", since=NOW - 7200)]
    slurm = {"int09": idle("int09", 7000)}
    bad = job(
        1, **cpus(16), memory_per_cpu=1024, state_reason="BadConstraints", hold=True, priority=0
    )
    held = job(2, hold=True, state_reason="JobHeldUser")
    record = {"int09": Shape(8000, 64 * GIB)}
    jobs = limited(bad, held, registered=record, slurmd=(EIGHT_CPUS,))
    result = plan(nodes, [], slurm, DEMAND, NOW, jobs)
    assert (result.lend, result.reclaim) == ((), ())
    assert result.slurm_demand is not None
    assert result.slurm_demand["skipped"] == [
        {"reason": "asks more than a pool node has: CPUs 16 > 8", "jobs": 1, "examples": [1]},
        {"reason": "held", "jobs": 1, "examples": [2]},
    ]


def test_demand_headroom_adds_nodes_while_jobs_wait() -> None:
    policy = Policy(pool_selector=POOL, headroom=0, lend_when="demand", demand_headroom=2)
    result = plan(FREE, [], {}, policy, NOW, queue(job(1, **EXCLUSIVE)))
    assert [(d.node, d.reason) for d in result.lend] == [
        ("int01", "for pending job(s) 1 of Slurm"),
        ("int02", "demand_headroom: jobs wait in Slurm"),
        ("int03", "demand_headroom: jobs wait in Slurm"),
    ]
    # Nothing waits, or nothing that fits: no headroom either.
    assert plan(FREE, [], {}, policy, NOW, SlurmQueue((), PARTITIONS)).lend == ()
    held = queue(job(2, hold=True, state_reason="JobHeldUser"))
    assert plan(FREE, [], {}, policy, NOW, held).lend == ()


def test_demand_headroom_is_within_the_room() -> None:
    policy = Policy(
        pool_selector=POOL, headroom=0, lend_when="demand", demand_headroom=3, max_lent=2
    )
    result = plan(FREE, [], {}, policy, NOW, queue(job(1, **EXCLUSIVE)))
    assert names(result.lend) == ["int01", "int02"]


def test_demand_headroom_while_a_job_waits_for_room() -> None:
    """A 2-node job that max_lent leaves no room for still waits: headroom is lent."""
    policy = Policy(
        pool_selector=POOL, headroom=0, lend_when="demand", demand_headroom=1, max_lent=1
    )
    two = job(1, node_count=2, cpus=2, cpus_per_node=1)
    result = plan(FREE, [], {}, policy, NOW, queue(two))
    assert [(d.node, d.reason) for d in result.lend] == [
        ("int01", "demand_headroom: jobs wait in Slurm")
    ]
    assert result.slurm_demand is not None
    assert result.slurm_demand["unplaced_jobs"] == [1]


def test_max_lent_caps_the_demand() -> None:
    jobs = queue(*(job(i, **EXCLUSIVE) for i in range(1, 5)))
    capped = Policy(pool_selector=POOL, headroom=0, lend_when="demand", max_lent=2)
    result = plan(FREE, [], {}, capped, NOW, jobs)
    assert names(result.lend) == ["int01", "int02"]
    left = reasons(result.left_alone)
    assert left["int03"] == "kept free: job(s) 3, 4 need more nodes than this run can lend"
    assert result.slurm_demand is not None
    assert result.slurm_demand["unplaced_jobs"] == [3, 4]
    # Lent nodes count against max_lent.
    with_lent = plan([*FREE, node("int09", "lent")], [], {}, capped, NOW, jobs)
    assert names(with_lent.lend) == ["int01"]


def test_max_changes_per_run_caps_the_demand() -> None:
    jobs = queue(*(job(i, **EXCLUSIVE) for i in range(1, 5)))
    policy = Policy(pool_selector=POOL, headroom=0, lend_when="demand", max_changes_per_run=1)
    assert names(plan(FREE, [], {}, policy, NOW, jobs).lend) == ["int01"]
    # A node being lent is resumed, and counts.
    policy3 = Policy(pool_selector=POOL, headroom=0, lend_when="demand", max_changes_per_run=3)
    nodes = [*FREE, node("int08", "lending"), node("int09", "reclaiming")]
    result = plan(nodes, [], {"int08": idle("int08", 0)}, policy3, NOW, jobs)
    assert names(result.resume) == ["int08", "int09"]
    # int08, being lent and idle in Slurm, takes job 1; one change is left for job 2.
    assert [(d.node, d.reason) for d in result.lend] == [("int01", "for pending job(s) 2 of Slurm")]


def test_an_idle_lent_node_takes_a_job_and_is_kept() -> None:
    nodes = [*FREE, node("int09", "lent", since=NOW - 7200)]
    slurm = {"int09": idle("int09", 7000)}
    result = plan(nodes, [], slurm, DEMAND, NOW, queue(job(1)))
    assert (result.lend, result.reclaim) == ((), ())
    assert reasons(result.left_alone)["int09"] == "lent; a waiting job will run there"
    assert result.slurm_demand is not None
    assert result.slurm_demand["lent_nodes_used"] == ["int09"]


def test_by_default_idle_lent_nodes_stay_lent() -> None:
    nodes = [node("int01"), node("int09", "lent", since=NOW - 7200)]
    result = plan(
        nodes, [], {"int09": idle("int09", 9000)}, DEMAND, NOW, SlurmQueue((), PARTITIONS)
    )
    assert result.reclaim == ()
    assert reasons(result.left_alone)["int09"] == "lent"


def test_an_idle_lent_node_is_given_back_after_demand_return_idle_s() -> None:
    policy = Policy(pool_selector=POOL, headroom=0, lend_when="demand", demand_return_idle_s=600)
    nodes = [node("int01"), node("int09", "lent", since=NOW - 7200)]
    empty = SlurmQueue((), PARTITIONS)
    back = plan(nodes, [], {"int09": idle("int09", 700)}, policy, NOW, empty)
    assert [(d.node, d.reason) for d in back.reclaim] == [
        ("int09", "idle in Slurm 700 s; no waiting job needs it")
    ]
    assert back.lend == ()
    # Not before demand_return_idle_s: since its last job...
    kept = plan(nodes, [], {"int09": idle("int09", 500)}, policy, NOW, empty)
    assert kept.reclaim == ()
    assert reasons(kept.left_alone)["int09"] == "lent"
    # ...nor since its lend, when it never ran one.
    fresh = [node("int01"), node("int09", "lent", since=NOW - 300)]
    never_ran = {"int09": SlurmNodeView("int09", frozenset({"IDLE"}))}
    assert plan(fresh, [], never_ran, policy, NOW, empty).reclaim == ()
    old = [node("int01"), node("int09", "lent", since=NOW - 900)]
    assert names(plan(old, [], never_ran, policy, NOW, empty).reclaim) == ["int09"]


def test_lent_nodes_busy_in_slurm_are_not_given_back() -> None:
    nodes = [node("int07", "lent", since=0), node("int08", "lent", since=0)]
    slurm = {
        "int07": SlurmNodeView(
            "int07", frozenset({"ALLOCATED"}), (JobView(3, "backfill", NOW + 60),), last_busy=NOW
        ),
        "int08": SlurmNodeView("int08", frozenset({"IDLE", "DRAIN"}), last_busy=NOW - 9000),
    }
    result = plan(nodes, [], slurm, DEMAND, NOW, SlurmQueue((), PARTITIONS))
    assert result.reclaim == ()
    assert reasons(result.left_alone) == {"int07": "lent", "int08": "lent"}


def test_a_lent_node_a_waiting_job_will_use_is_not_given_back() -> None:
    nodes = [node("int08", "lent", since=0), node("int09", "lent", since=0)]
    slurm = {"int08": idle("int08", 9000), "int09": idle("int09", 8000)}
    returning = Policy(pool_selector=POOL, headroom=0, lend_when="demand", demand_return_idle_s=600)
    result = plan(nodes, [], slurm, returning, NOW, queue(job(1)))
    assert [(d.node, d.reason) for d in result.reclaim] == [
        ("int09", "idle in Slurm 8000 s; no waiting job needs it")
    ]
    assert reasons(result.left_alone) == {"int08": "lent; a waiting job will run there"}


def test_idle_lent_nodes_are_given_back_longest_idle_first_within_the_budget() -> None:
    policy = Policy(
        pool_selector=POOL,
        headroom=0,
        lend_when="demand",
        max_changes_per_run=2,
        demand_return_idle_s=600,
    )
    nodes = [node(f"int0{i}", "lent", since=0) for i in (1, 2, 3)]
    slurm = {
        "int01": idle("int01", 1000),
        "int02": idle("int02", 3000),
        "int03": idle("int03", 2000),
    }
    result = plan(nodes, [], slurm, policy, NOW, SlurmQueue((), PARTITIONS))
    assert names(result.reclaim) == ["int02", "int03"]
    assert reasons(result.left_alone) == {"int01": "lent"}


def test_a_run_that_lends_gives_nothing_back() -> None:
    """A job that needs a GPU is lent gpu01; the idle lent CPU node stays lent this run."""
    nodes = [node("gpu01", gpus=4), node("int09", "lent", since=0)]
    slurm = {"int09": idle("int09", 9000)}
    result = plan(nodes, [], slurm, DEMAND, NOW, queue(job(1, tres_per_node="gres/gpu:1")))
    assert names(result.lend) == ["gpu01"]
    assert result.reclaim == ()
    assert reasons(result.left_alone) == {"int09": "lent"}


def test_pending_application_pods_reclaim_first() -> None:
    nodes = [node("int08", "lent", since=0), node("int09", "lent", since=0)]
    slurm = {"int08": idle("int08", 9000), "int09": idle("int09", 10)}
    pods = [app_pod("jupyter-alice", cpu_m=20000)]
    result = plan(nodes, pods, slurm, DEMAND, NOW, queue(job(1), job(2)))
    assert [(d.node, d.reason) for d in result.reclaim] == [
        ("int08", "1 node(s) for 1 pending pod(s): 0 free idle, 1 wanted")
    ]
    assert result.lend == ()
    assert result.slurm_demand is None
    assert result.as_dict()["slurm_demand"] is None
    assert reasons(result.left_alone) == {"int09": "lent; not needed back in this run"}


def test_without_a_queue_demand_lends_nothing() -> None:
    result = plan(FREE, [], {}, DEMAND, NOW)
    assert result.lend == ()
    assert set(reasons(result.left_alone).values()) == {"free; no job waiting in Slurm needs it"}
    assert result.slurm_demand is not None
    assert result.slurm_demand["pending_jobs"] == 0


def test_a_lending_node_outside_the_pool_takes_no_job() -> None:
    outside = node("svc01", "lending", labels={"hpcops.io/pool": "services"})
    result = plan([node("int01"), outside], [], {}, DEMAND, NOW, queue(job(1)))
    # Its journal is ours: shown until it is given back by name (reconcile.py).
    assert reasons(result.left_alone)["svc01"] == (
        "left the pool with our marks on it: reclaim it by name"
    )
    assert names(result.lend) == ["int01"]


# ---- property ---------------------------------------------------------------------------


@st.composite
def demand_clusters(
    draw: st.DrawFn,
) -> tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView], Policy, SlurmQueue]:
    nodes, pods, slurm = [], [], {}
    for i in range(draw(st.integers(0, 12))):
        name = f"n{i:03d}"
        state = draw(st.sampled_from(["free"] * 4 + ["lent", "lent", "lending", "reclaiming"]))
        labels = draw(st.sampled_from([POOL, POOL, POOL, {**POOL, **NEVER}]))
        journal: dict[str, float] = {"idle_since": NOW - draw(st.integers(0, 3600))}
        if state != "free":
            journal["since"] = NOW - draw(st.integers(0, 3600))
        if draw(st.booleans()):
            journal["last_reclaim"] = NOW - draw(st.integers(0, 7200))
        gpus = draw(st.sampled_from([0, 0, 2]))
        nodes.append(node(name, state, gpus=gpus, labels=labels, **journal))
        if draw(st.integers(0, 5)) == 0:
            pods.append(app_pod(f"app-{name}", name))
        if state in ("lent", "lending") or (state == "free" and draw(st.integers(0, 9)) == 0):
            busy = draw(st.booleans())
            slurm[name] = SlurmNodeView(
                name,
                frozenset({"ALLOCATED" if busy else "IDLE"}),
                (JobView(i, "backfill", NOW + 60),) if busy else (),
                last_busy=NOW - draw(st.integers(0, 3600)),
            )
    pods += [app_pod(f"pending-{i}") for i in range(draw(st.integers(0, 1)))]
    jobs = []
    for i in range(draw(st.integers(0, 8))):
        fields: dict[str, t.Any] = {
            "partition": draw(st.sampled_from(["backfill", "backfill", "batch", "batch,backfill"])),
            "state_reason": draw(
                st.sampled_from(
                    ["PartitionConfig", "PartitionConfig", "Resources", "Priority", "BeginTime"]
                )
            ),
            "hold": draw(st.integers(0, 7)) == 0,
            "time_limit": draw(st.sampled_from([5, 60, 240, 240, 300, "infinite", None])),
            "requeue": draw(st.integers(0, 3)) > 0,
            "priority": draw(st.integers(0, 3)),
            "node_count": draw(st.integers(1, 3)),
            "cpus_per_node": draw(st.sampled_from([1, 8, 16, 32, 48])),
            "shared": draw(st.sampled_from([[], ["none"]])),
            "tres_per_node": draw(st.sampled_from(["", "", "gres/gpu:1"])),
        }
        fields["cpus"] = fields["cpus_per_node"] * fields["node_count"]
        jobs.append(job(100 + i, **fields))
    policy = Policy(
        pool_selector=POOL,
        never_touch_selector=NEVER,
        headroom=draw(st.integers(0, 2)),
        max_lent=draw(st.one_of(st.none(), st.integers(0, 12))),
        lend_min_idle_s=draw(st.sampled_from([0, 600])),
        relend_cooldown_s=draw(st.sampled_from([0, 1800])),
        max_changes_per_run=draw(st.integers(1, 10)),
        lend_when="demand",
        demand_headroom=draw(st.integers(0, 3)),
        demand_return_idle_s=draw(st.sampled_from([None, 0, 600])),
        partitions={"backfill": PartitionPolicy(draw(st.sampled_from([300, 20000])), "requeue")},
    )
    # What Slurm has of the nodes: the lendable NodeSet's slurmd limits (none, smaller or
    # larger than the Nodes' allocatable), and its record of the registered ones.
    limits = draw(
        st.sampled_from([(), (EIGHT_CPUS,), (SlurmdLimits("interactive", POOL, cpus=64, gpus=1),)])
    )
    registered = {
        name: Shape(draw(st.sampled_from([8000, 32000, 64000])), 256 * GIB)
        for name in slurm
        if draw(st.booleans())
    }
    return nodes, pods, slurm, policy, limited(*jobs, registered=registered, slurmd=limits)


@given(demand_clusters())
@settings(max_examples=300, deadline=None)
def test_demand_properties(
    cluster: tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView], Policy, SlurmQueue],
) -> None:
    nodes, pods, slurm, policy, jobs = cluster
    result = plan(nodes, pods, slurm, policy, NOW, jobs)
    by_name = {n.name: n for n in nodes}
    pool = [
        n
        for n in nodes
        if n.labels == POOL and n.journal.state in ("free", "lent")  # as plan classifies
    ]
    shapes = [
        jobs.offer(
            n.name, n.labels, Shape(n.cpu_m, n.memory_b, n.gpus), lent=n.journal.state == "lent"
        )
        for n in pool
    ]
    fitting_nodes = sum(
        j.nodes
        for j in jobs.jobs
        if any(
            demand_blocker(j, jobs.partitions[p], policy, shapes) is None
            for p in j.partitions
            if p in jobs.partitions
        )
    )
    lent_now = names(result.lend)
    # Never more than the fitting jobs' nodes and the demand headroom.
    assert len(lent_now) <= fitting_nodes + policy.demand_headroom
    # Never a node that may not be lent: free, in the pool, idle long enough, no app pod.
    app_pods = {p.node: 0 for p in pods}
    for p in pods:
        if p.node:
            app_pods[p.node] += 1
    for name in lent_now:
        lending = by_name[name]
        assert lending.journal.state == "free"
        assert lending.labels == POOL
        assert lend_blocker(lending, app_pods.get(name, 0), policy, NOW) is None
        assert name not in slurm  # no record left from an earlier loan
    # Never lend and reclaim at once; only lent nodes are reclaimed; each node once.
    assert not (result.lend and result.reclaim)
    assert all(by_name[n].journal.state == "lent" for n in names(result.reclaim))
    # Nodes whose evidence disagrees (reconcile.py) are resolved, emergencies in any case.
    acted = lent_now + names(result.reclaim) + names(result.resume) + names(result.reconcile)
    assert len(acted) == len(set(acted))
    assert sorted(acted + names(result.left_alone)) == sorted(by_name)
    urgent = len([m for m in result.reconcile if m.emergency])
    assert len(acted) <= max(policy.max_changes_per_run, len(result.resume) + urgent)


# ---- read_slurm_jobs: one read of the jobs, kept small -----------------------------------


class FakeSlurm:
    """The Slurm client as read_slurm_jobs uses it: partitions() and jobs(keep)."""

    def __init__(self, partitions: list[dict[str, t.Any]], jobs: list[dict[str, t.Any]]) -> None:
        self._partitions = partitions
        self._jobs = jobs

    def partitions(self) -> list[dict[str, t.Any]]:
        return self._partitions

    def jobs(self, keep: t.Callable[[dict[str, t.Any]], t.Any]) -> list[t.Any]:
        return [kept for kept in map(keep, self._jobs) if kept is not None]


SLINKY_PARTITIONS = [
    {
        "name": "batch",
        "nodes": "",
        "node_sets": "hpc",
        "max_time": "infinite",
        "default_time": None,
    },
    {"name": "backfill", "nodes": "", "node_sets": "burst", "max_time": 240, "default_time": 60},
    {"name": "all", "nodes": "ALL", "node_sets": "", "max_time": None, "default_time": None},
]


def test_read_slurm_jobs_keeps_running_jobs_small_and_pending_ones_of_lendable_partitions() -> None:
    running = {
        **job(1, state="RUNNING", partition="batch", nodes="cpu01", end_time=NOW + 60),
        "state_reason": "None",
    }
    jobs = [
        running,
        job(2),  # backfill: lendable
        job(3, partition="batch,backfill"),
        job(4, partition="batch"),  # not lendable
        {**job(5), "state": "COMPLETED"},
        job(6, partition="all", hold=True, state_reason="JobHeldUser"),
    ]
    found, slurm_queue = read_slurm_jobs(FakeSlurm(SLINKY_PARTITIONS, jobs), ["burst"])
    assert found == [
        {
            "job_id": 1,
            "partition": "batch",
            "state": "RUNNING",
            "end_time": NOW + 60,
            "nodes": "cpu01",
        }
    ]
    assert set(found[0]) == set(RUNNING_JOB_FIELDS)
    assert slurm_queue.jobs == (pending_job(jobs[1]), pending_job(jobs[2]), pending_job(jobs[5]))
    assert [j.job_id for j in slurm_queue.jobs] == [2, 3, 6]
    assert slurm_queue.partitions == {
        "all": LendablePartition("all", None, None),
        "backfill": LendablePartition("backfill", 14400.0, 3600.0),
    }


def client_for(fake: FakeSlurmRestd) -> SlurmRestClient:
    connection = Connection(url="http://127.0.0.1:6820", token="a-token", api_version="v0.0.45")
    return SlurmRestClient(connection, opener=fake, sleep=lambda _: None)


def test_read_slurm_jobs_through_the_client_of_the_recorded_lab() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "partitions", "GET", "partitions/")
    fake.replay("v0.0.45", "jobs", "GET", "jobs/")
    found, slurm_queue = read_slurm_jobs(client_for(fake), ["slinky"])
    # Both recorded partitions name NodeSets ALL: both are lendable.
    assert found == [
        {
            "job_id": 1,
            "partition": "batch",
            "state": "RUNNING",
            "end_time": 1826854549,
            "nodes": "cpu01",
        }
    ]
    assert slurm_queue.jobs == (pending_job(RECORDED_PENDING),)
    assert slurm_queue.partitions == {
        "backfill": LendablePartition("backfill", 14400.0, None),
        "batch": LendablePartition("batch", None, None),
    }
    # One read of each.
    assert [r["path"] for r in fake.sent("GET") if r["path"].startswith("/slurm/")] == [
        "/slurm/v0.0.45/partitions/",
        "/slurm/v0.0.45/jobs/",
    ]


class CutResponse:
    """An answer whose connection is reset after its first `keep` bytes."""

    def __init__(self, payload: bytes, keep: int) -> None:
        self._payload = payload[:keep]

    def getcode(self) -> int:
        return 200

    def read(self, size: int = -1) -> bytes:
        if not self._payload:
            raise ConnectionResetError(104, "Connection reset by peer")
        chunk, self._payload = self._payload[:size], self._payload[size:]
        return chunk


def test_a_retried_jobs_read_lists_each_running_job_once() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "partitions", "GET", "partitions/")
    status, body = recording("26.05", "v0.0.45", "jobs")
    payload = json.dumps({"jobs": body["jobs"], "errors": []}).encode()
    first = {"done": False}

    def opener(url: str, **kwargs: t.Any) -> t.Any:
        if url.endswith("/jobs/") and not first["done"]:
            first["done"] = True
            fake.requests.append({"method": "GET", "path": "/slurm/v0.0.45/jobs/"})
            # Cut after the first job (the running one) went by.
            return CutResponse(payload, payload.index(b'"hpcops-pending"'))
        return fake(url, **kwargs)

    fake.answer("GET", "/slurm/v0.0.45/jobs/", status, body)
    connection = Connection(url="http://127.0.0.1:6820", token="t", api_version="v0.0.45")
    client = SlurmRestClient(connection, opener=opener, sleep=lambda _: None)
    found, slurm_queue = read_slurm_jobs(client, ["slinky"])
    # partitions, the cut read, the retry
    assert [r["path"] for r in fake.sent("GET") if r["path"].startswith("/slurm/")] == [
        "/slurm/v0.0.45/partitions/",
        "/slurm/v0.0.45/jobs/",
        "/slurm/v0.0.45/jobs/",
    ]
    assert [j.job_id for j in slurm_queue.jobs] == [2]
    assert [j["job_id"] for j in found] == [1]
