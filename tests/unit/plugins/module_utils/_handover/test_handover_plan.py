# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover planner: examples, and properties that hold for any cluster (hypothesis)."""

from __future__ import annotations

import dataclasses
import gc
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    Journal,
    PartitionPolicy,
    Policy,
    PolicyError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
    OrphanAction,
    Plan,
    demanded_nodes,
    orphans,
    plan,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    JobView,
    NodeView,
    PodView,
    SlurmNodeView,
    node_view,
    pod_view,
    slurm_node_views,
)

NOW = 1_800_000_000.0
POOL = {"hpcops.io/pool": "interactive"}
NEVER = {"hpcops.io/never-touch": "true"}
GIB = 1024**3


def node(
    name: str, state: str = "free", *, labels: dict[str, str] | None = None, **journal: float
) -> NodeView:
    text = (
        json.dumps({"state": state, "op": "op1", **journal}) if state != "free" or journal else None
    )
    return NodeView(
        name=name,
        labels=POOL if labels is None else labels,
        journal=Journal.parse(text),
        cpu_m=32000,
        memory_b=256 * GIB,
    )


def app_pod(name: str, node_name: str = "", *, cpu_m: int = 4000) -> PodView:
    pending = not node_name
    return PodView(
        namespace="jupyterhub",
        name=name,
        node=node_name,
        phase="Pending" if pending else "Running",
        unschedulable=pending,
        cpu_m=cpu_m,
        memory_b=16 * GIB,
    )


POLICY = Policy(pool_selector=POOL, never_touch_selector=NEVER, headroom=1, lend_min_idle_s=0)


def names(decisions: tuple[object, ...]) -> list[str]:
    return [d.node for d in decisions]  # type: ignore[attr-defined]


def test_idle_nodes_beyond_headroom_are_lent() -> None:
    nodes = [node("int01"), node("int02"), node("int03")]
    result = plan(nodes, [app_pod("busy", "int03")], {}, POLICY, NOW)
    # int03 runs an application pod; one of the two idle ones stays free (headroom 1).
    assert names(result.lend) == ["int01"]
    assert not result.reclaim
    reasons = {d.node: d.reason for d in result.left_alone}
    assert reasons["int03"] == "runs 1 application pod(s)"
    assert "kept free" in reasons["int02"]


def test_a_record_no_lent_node_stands_for_is_an_orphan_and_blocks_a_new_lend() -> None:
    """int01's Node was deleted while lent and came back (free, no slurmd) before its Slurm
    record was removed; int09's is gone for good; int02 is lent and int03 is lending."""
    nodes = [node("int01"), node("int02", "lent"), node("int03", "lending"), node("int04")]
    pods = [PodView("slurm", "slurmd-int02", node="int02", slurmd=True)]
    stuck = SlurmNodeView(
        "int01", frozenset({"ALLOCATED", "DRAIN", "NOT_RESPONDING"}), (JobView(7, "backfill"),)
    )
    slurm = {
        "int01": dataclasses.replace(stuck, features=frozenset({"interactive"})),
        "int02": SlurmNodeView("int02", features=frozenset({"interactive"})),
        "int03": SlurmNodeView("int03", features=frozenset({"interactive"})),
        "int09": SlurmNodeView("int09", frozenset({"IDLE"}), features=frozenset({"interactive"})),
        "cpu01": SlurmNodeView("cpu01", features=frozenset({"hpc"})),
    }
    found = {o.node: o for o in orphans(nodes, slurm, ["interactive"], pods)}
    assert sorted(found) == ["int01", "int09"]
    assert found["int01"].action == OrphanAction.WAIT
    assert found["int01"].reason.startswith("its Kubernetes Node came back, free in the journal")
    assert found["int09"].action == OrphanAction.DRAIN
    assert found["int09"].reason.startswith("no Kubernetes Node")
    # With slurmd on it again, the Node stands for the record: no orphan.
    back = [*pods, PodView("slurm", "slurmd-int01", node="int01", slurmd=True)]
    assert "int01" not in {o.node for o in orphans(nodes, slurm, ["interactive"], back)}
    # int01 is idle and free, but a lend would register a new slurmd into that record.
    result = plan([node("int01"), node("int04"), node("int05")], [], slurm, POLICY, NOW)
    assert names(result.lend) == ["int04", "int05"]
    reasons = {d.node: d.reason for d in result.left_alone}
    assert reasons["int01"] == "its Slurm record from an earlier loan is still there (an orphan)"


def test_outside_pool_and_never_touch_are_left_alone() -> None:
    nodes = [
        node("int01"),
        node("svc01", labels={"hpcops.io/pool": "services"}),
        node("int09", labels={**POOL, **NEVER}),
    ]
    result = plan(
        nodes,
        [],
        {},
        Policy(pool_selector=POOL, never_touch_selector=NEVER, headroom=0, lend_min_idle_s=0),
        NOW,
    )
    assert names(result.lend) == ["int01"]
    reasons = {d.node: d.reason for d in result.left_alone}
    assert reasons == {"svc01": "not in the lendable pool", "int09": "never-touch"}


def test_pending_pods_reclaim_the_cheapest_lent_nodes_first() -> None:
    nodes = [node("int01", "lent"), node("int02", "lent"), node("int03", "lent")]
    slurm = {
        "int01": SlurmNodeView(
            "int01", frozenset({"ALLOCATED"}), (JobView(1, "backfill", NOW + 3600),)
        ),
        "int02": SlurmNodeView("int02", frozenset({"IDLE"})),
        "int03": SlurmNodeView("int03", frozenset({"MIXED"}), (JobView(2, "backfill", NOW + 60),)),
    }
    # Two pods of 20 cores: two nodes; headroom 0.
    pods = [app_pod("a", cpu_m=20000), app_pod("b", cpu_m=20000)]
    result = plan(nodes, pods, slurm, Policy(pool_selector=POOL, headroom=0), NOW)
    assert names(result.reclaim) == ["int02", "int03"]  # idle first, then the soonest end
    assert result.demand_nodes == 2
    assert not result.lend


def test_wait_partition_nodes_come_last() -> None:
    nodes = [node("int01", "lent"), node("int02", "lent")]
    slurm = {
        "int01": SlurmNodeView(
            "int01", frozenset({"ALLOCATED"}), (JobView(1, "precious", NOW + 10),)
        ),
        "int02": SlurmNodeView(
            "int02", frozenset({"ALLOCATED"}), (JobView(2, "backfill", NOW + 9000),)
        ),
    }
    policy = Policy(
        pool_selector=POOL, headroom=1, partitions={"precious": PartitionPolicy(60, "wait")}
    )
    assert names(plan(nodes, [], slurm, policy, NOW).reclaim) == ["int02"]


def test_nodes_in_flight_are_resumed_first_and_count_against_the_budget() -> None:
    nodes = [node("int01", "lending"), node("int02", "reclaiming"), node("int03"), node("int04")]
    policy = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0, max_changes_per_run=3)
    result = plan(nodes, [], {}, policy, NOW)
    assert names(result.resume) == ["int01", "int02"]
    assert names(result.lend) == ["int03"]


def test_lend_waits_for_min_idle_and_cooldown() -> None:
    policy = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=600, relend_cooldown_s=1800)
    fresh = node("int01")  # first seen idle now
    settled = node("int02", idle_since=NOW - 700)
    reclaimed = node("int03", idle_since=NOW - 7000, last_reclaim=NOW - 100)
    result = plan([fresh, settled, reclaimed], [], {}, policy, NOW)
    assert names(result.lend) == ["int02"]
    assert result.idle_marks == {"int01": NOW}
    reasons = {d.node: d.reason for d in result.left_alone}
    assert "lend_min_idle_s" in reasons["int01"]
    assert "relend_cooldown_s" in reasons["int03"]


def test_max_lent_caps_the_loan() -> None:
    nodes = [node(f"int{i:02d}") for i in range(1, 9)]
    capped = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0, max_lent=3)
    assert len(plan(nodes, [], {}, capped, NOW).lend) == 3
    half = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0, max_lent_fraction=0.5)
    assert len(plan(nodes, [], {}, half, NOW).lend) == 4


def test_unreadable_journal_is_left_alone() -> None:
    broken = NodeView("int01", POOL, journal=Journal.parse("{not json"))
    result = plan([broken], [], {}, POLICY, NOW)
    assert not result.lend and not result.resume
    assert "journal unreadable" in result.left_alone[0].reason


def test_daemonset_and_system_pods_do_not_make_a_node_busy() -> None:
    pods = [
        PodView("kube-system", "proxy", node="int01"),
        PodView("monitoring", "node-exporter", node="int01", daemonset=True),
    ]
    policy = Policy(pool_selector=POOL, headroom=0, lend_min_idle_s=0)
    assert names(plan([node("int01")], pods, {}, policy, NOW).lend) == ["int01"]


def test_first_fit_packs_small_pods() -> None:
    pods = [app_pod(f"p{i}", cpu_m=8000) for i in range(5)]
    assert demanded_nodes(pods, (32000, 256 * GIB)) == 2


def first_fit_one_pod_at_a_time(
    pods: list[PodView], shape: tuple[int, int], limit: int | None
) -> int:
    """First-fit decreasing as written out, one pod and one scan of the bins at a time."""
    if not pods:
        return 0
    smallest = (min(p.cpu_m for p in pods), min(p.memory_b for p in pods))
    opened, bins = 0, []
    for pod in sorted(pods, key=lambda p: (p.cpu_m, p.memory_b), reverse=True):
        fit = next(
            (i for i, r in enumerate(bins) if pod.cpu_m <= r[0] and pod.memory_b <= r[1]), None
        )
        if fit is None:
            opened += 1
            if limit is not None and opened > limit:
                return opened
            bins.append([shape[0], shape[1]])
            fit = len(bins) - 1
        room = bins[fit]
        room[0], room[1] = max(room[0] - pod.cpu_m, 0), max(room[1] - pod.memory_b, 0)
        if room[0] < smallest[0] or room[1] < smallest[1]:
            del bins[fit]
    return opened


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(
        st.tuples(
            st.sampled_from([0, 500, 1000, 3000, 8000, 40000]), st.sampled_from([0, 1, 3, 8, 300])
        ),
        max_size=40,
    ),
    limit=st.one_of(st.none(), st.integers(0, 10)),
)
def test_pods_of_one_size_placed_together_need_what_first_fit_says(
    sizes: list[tuple[int, int]], limit: int | None
) -> None:
    pods = [
        dataclasses.replace(app_pod(f"p{i}", cpu_m=cpu), memory_b=gib * GIB)
        for i, (cpu, gib) in enumerate(sizes)
    ]
    shape = (32000, 256 * GIB)
    assert demanded_nodes(pods, shape, limit) == first_fit_one_pod_at_a_time(pods, shape, limit)


@pytest.mark.parametrize(
    ("policy", "setting"),
    [
        (Policy(pool_selector={}), "pool_selector"),
        (Policy(pool_selector=POOL, headroom=-1), "headroom"),
        (Policy(pool_selector=POOL, max_changes_per_run=0), "max_changes_per_run"),
        (Policy(pool_selector=POOL, max_lent_fraction=1.5), "max_lent_fraction"),
        (
            Policy(pool_selector=POOL, partitions={"backfill": PartitionPolicy(30, "kill")}),
            "partitions.backfill.escalation",
        ),
    ],
)
def test_bad_policy_names_the_setting(policy: Policy, setting: str) -> None:
    with pytest.raises(PolicyError, match=setting.replace(".", r"\.")):
        plan([], [], {}, policy, NOW)


def test_a_plan_leaves_the_cyclic_gc_as_it_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paused while a plan runs, back on after it, even when the policy is refused; left
    off where the caller had turned it off."""
    seen = []
    original = Policy.check

    def check(policy: Policy) -> None:
        seen.append(gc.isenabled())
        original(policy)

    monkeypatch.setattr(Policy, "check", check)
    plan([node("int01")], [], {}, Policy(pool_selector=POOL), NOW)
    assert seen == [False]
    assert gc.isenabled()
    with pytest.raises(PolicyError):
        plan([], [], {}, Policy(pool_selector={}), NOW)
    assert gc.isenabled()
    assert seen == [False, False]
    gc.disable()
    try:
        plan([node("int01")], [], {}, Policy(pool_selector=POOL), NOW)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---- properties ---------------------------------------------------------------------

STATES = ["free", "free", "free", "lent", "lent", "lending", "reclaiming"]


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView], Policy]:
    count = draw(st.integers(0, 24))
    nodes, pods, slurm = [], [], {}
    for i in range(count):
        name = f"n{i:03d}"
        kind = draw(st.sampled_from(["pool", "pool", "pool", "never", "outside"]))
        labels = {"pool": POOL, "never": {**POOL, **NEVER}, "outside": {"hpcops.io/pool": "svc"}}[
            kind
        ]
        state = draw(st.sampled_from(STATES))
        journal = {"idle_since": NOW - draw(st.integers(0, 3600))}
        if draw(st.booleans()):
            journal["last_reclaim"] = NOW - draw(st.integers(0, 7200))
        nodes.append(node(name, state, labels=labels, **journal))
        if draw(st.integers(0, 3)) == 0:
            pods.append(app_pod(f"app-{name}", name))
        if state == "lent":
            jobs = tuple(
                JobView(
                    i * 10 + j,
                    draw(st.sampled_from(["backfill", "precious"])),
                    NOW + draw(st.integers(1, 9000)),
                )
                for j in range(draw(st.integers(0, 3)))
            )
            slurm[name] = SlurmNodeView(name, frozenset({"ALLOCATED" if jobs else "IDLE"}), jobs)
    pods += [
        app_pod(f"pending-{i}", cpu_m=draw(st.integers(1000, 40000)))
        for i in range(draw(st.integers(0, 8)))
    ]
    policy = Policy(
        pool_selector=POOL,
        never_touch_selector=NEVER,
        headroom=draw(st.integers(0, 4)),
        max_lent=draw(st.one_of(st.none(), st.integers(0, 20))),
        lend_min_idle_s=draw(st.sampled_from([0, 600])),
        relend_cooldown_s=draw(st.sampled_from([0, 1800])),
        max_changes_per_run=draw(st.integers(1, 10)),
        partitions={"precious": PartitionPolicy(60, "wait")},
    )
    return nodes, pods, slurm, policy


@given(clusters())
@settings(max_examples=300, deadline=None)
def test_properties(
    cluster: tuple[list[NodeView], list[PodView], dict[str, SlurmNodeView], Policy],
) -> None:
    nodes, pods, slurm, policy = cluster
    result = plan(nodes, pods, slurm, policy, NOW)
    by_name = {n.name: n for n in nodes}
    mended = names(result.reconcile)
    acted = names(result.lend) + names(result.reclaim) + names(result.resume) + mended

    # Never a never-touch node, never one outside the pool: except a node that left the
    # pool with a Slurm job beside an application pod (an emergency, given back).
    urgent_names = {m.node for m in result.reconcile if m.emergency}
    for name in acted:
        labels = by_name[name].labels
        assert labels.get("hpcops.io/pool") == "interactive" or name in urgent_names
        assert labels.get("hpcops.io/never-touch") != "true"
    # One action per node, and lend and reclaim never in the same run.
    assert len(acted) == len(set(acted))
    assert not (result.lend and result.reclaim)
    # Never below headroom: what stays free and idle covers the demand and the headroom.
    wanted = result.demand_nodes + policy.headroom
    if result.lend:
        assert result.free_idle - len(result.lend) >= wanted
    # Never more reclaimed than the shortfall, nor more changes than the policy allows.
    assert len(result.reclaim) <= max(wanted - result.free_idle, 0)
    urgent = len([m for m in result.reconcile if m.emergency])
    assert len(acted) <= max(policy.max_changes_per_run, len(result.resume) + urgent)
    # A node whose evidence disagrees is never lent or reclaimed by the plan's own rules,
    # and nothing is lent while an emergency waits for its run.
    assert not set(mended) & set(names(result.lend) + names(result.reclaim))
    # Only lent nodes are reclaimed, only free ones lent.
    assert all(by_name[n].journal.state == "lent" for n in names(result.reclaim))
    assert all(by_name[n].journal.state == "free" for n in names(result.lend))
    # Every node is accounted for exactly once.
    assert sorted(acted + names(result.left_alone)) == sorted(by_name)
    # Same input, same plan, whatever the order the API listed things in.
    shuffled = nodes[len(nodes) // 2 :] + list(reversed(nodes[: len(nodes) // 2]))
    again: Plan = plan(
        shuffled, list(reversed(pods)), dict(reversed(list(slurm.items()))), policy, NOW
    )
    assert again == result


# ---- views of API objects -----------------------------------------------------------


def test_node_view_reads_readiness_cordon_journal_and_size() -> None:
    obj = {
        "metadata": {
            "name": "int01",
            "labels": POOL,
            "annotations": {"hpcops.io/handover": '{"state": "lent", "op": "a1", "since": 5}'},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "31500m", "memory": "256Gi"},
        },
    }
    view = node_view(obj, "hpcops.io/handover")
    assert (view.ready, view.unschedulable, view.cpu_m, view.memory_b) == (
        True,
        True,
        31500,
        256 * GIB,
    )
    assert (view.journal.state, view.journal.op, view.journal.since) == ("lent", "a1", 5.0)


def test_pod_view_sums_requests_and_sees_unschedulable() -> None:
    obj = {
        "metadata": {"namespace": "jupyterhub", "name": "jupyter-alice", "ownerReferences": []},
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
            ]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    view = pod_view(obj)
    assert (view.node, view.unschedulable, view.cpu_m) == ("", True, 2500)
    assert view.memory_b == 8 * GIB + 512 * 1024**2
    daemon = pod_view(
        {"metadata": {"ownerReferences": [{"kind": "DaemonSet"}]}, "spec": {"nodeName": "int01"}}
    )
    assert daemon.daemonset and daemon.node == "int01"


def test_slurm_node_views_attach_running_jobs() -> None:
    nodes = [
        {"name": "int01", "state": "ALLOCATED", "state_flags": ["DRAIN"]},
        {"name": "int02", "state": "IDLE", "state_flags": []},
    ]
    jobs = [
        {
            "job_id": 7,
            "state": "RUNNING",
            "partition": "backfill",
            "end_time": NOW + 60,
            "nodes": "int01",
        },
        {
            "job_id": 8,
            "state": "COMPLETED",
            "partition": "backfill",
            "end_time": NOW,
            "nodes": "int02",
        },
    ]
    views = slurm_node_views(nodes, jobs, lambda job: [job["nodes"]])
    assert views["int01"].states == frozenset({"ALLOCATED", "DRAIN"})
    assert views["int01"].jobs == (JobView(7, "backfill", NOW + 60),)
    assert views["int02"].jobs == ()
