# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""lend_when demand against the lab: the real slurmctld's queue decides what is lent.

Jobs go to the deployed Slurm's `backfill` partition (MaxTime 4:00:00; the lab's policy
gives it a 60 s grace and the requeue escalation). Before any lend the partition has no
node, so a pending job waits with the reason PartitionConfig. The pool's int01 and int02
are 32-CPU, 256 GiB nodes to Kubernetes; their slurmd runs on this machine.
"""

from __future__ import annotations

import contextlib
import typing as t
from collections.abc import Iterator

import pytest
from ansible_runner import run_task
from handover_pool import LENDABLE, MERGE, POLICY, Pool
from slurm_pods import REST_ADDRESS
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration

DEMAND = {**POLICY, "lend_when": "demand"}
# The lendable NodeSet the slurm_cluster role made of the lab's interactive pool.
INTERACTIVE = "/apis/slinky.slurm.net/v1beta1/namespaces/slurm/nodesets/slurm-worker-interactive"


def plan(pool: Pool, **policy: t.Any) -> t.Any:
    result = run_task(
        "hpcops.slinky.handover_plan",
        {
            "url": f"http://{REST_ADDRESS}",
            "jwt_key_path": str(pool.key_path),
            "kubeconfig": str(pool.lab.kubeconfig_path),
            "policy": {"pool_selector": {"hpcops.io/pool": "interactive"}, **DEMAND, **policy},
        },
    )
    assert not result.failed, result
    return result


def reasons(result: t.Any) -> dict[str, str]:
    return {d["node"]: d["reason"] for key in ("lend", "left_alone") for d in result[key]}


def idle(pool: Pool, name: str) -> bool:
    """Idle in Slurm, its last job's clean-up done."""
    node = pool.slurm_node(name)
    return node is not None and "IDLE" in node["state"] and "COMPLETING" not in node["state"]


def journals(pool: Pool) -> dict[str, str]:
    return {name: pool.journal(name)["state"] for name in LENDABLE}


@contextlib.contextmanager
def slurmd_limits(pool: Pool, limits: dict[str, str]) -> Iterator[None]:
    """The interactive NodeSet's slurmd container limited to `limits` (what Slinky hands
    slurmd as POD_CPUS and POD_MEMORY), then put back as the role made it. Only the
    NodeSet object changes: with no node lent it has no pod to roll, and the next Helm
    upgrade finds it as it left it."""
    slurmd = pool.lab.get(INTERACTIVE)["spec"].get("slurmd") or {}
    status, body = pool.lab.request(
        "PATCH",
        INTERACTIVE,
        {"spec": {"slurmd": {"resources": {"limits": limits}}}},
        content_type=MERGE,
    )
    assert status == 200, body
    try:
        yield
    finally:
        # Back as it was: no resources, or those it had (a merge patch drops a null).
        was = slurmd.get("resources")
        back = None if was is None else {**was, "limits": was.get("limits")}
        status, body = pool.lab.request(
            "PATCH", INTERACTIVE, {"spec": {"slurmd": {"resources": back}}}, content_type=MERGE
        )
        assert status == 200, body


def test_nothing_is_lent_for_an_empty_queue_nor_for_jobs_a_lent_node_would_not_start(
    clean_pool: Pool,
) -> None:
    pool = clean_pool
    result = plan(pool)
    assert result["lend"] == []
    assert result["slurm_demand"]["pending_jobs"] == 0
    assert reasons(result)["int01"] == "free; no job waiting in Slurm needs it"
    run = pool.playbook("rebalance", handover_policy=DEMAND)
    assert not run.failed, run.failures()
    assert journals(pool) == {"int01": "free", "int02": "free"}

    held = pool.queue(hold=True)
    too_wide = pool.queue(cpus_per_task=64)  # 64 CPUs; the pool's nodes have 32
    too_long = pool.queue(time_limit={"set": True, "number": 600})  # MaxTime is 240 min
    # Over the 60 s grace, and a reclaim could not requeue it.
    not_requeueable = pool.queue(requeue=False, time_limit={"set": True, "number": 30})
    after_held = pool.queue(dependency=f"afterok:{held}")
    result = plan(pool)
    demand = result["slurm_demand"]
    assert result["lend"] == [] and result["reclaim"] == []
    assert demand["pending_jobs"] == 5
    assert demand["fitting_jobs"] == 0
    skipped = {row["reason"]: row["examples"] for row in demand["skipped"]}
    # 64 CPUs and, at DefMemPerCPU 8192 MiB, 512 GiB of a 32-CPU, 256 GiB node.
    assert skipped == {
        "held": [held],
        "asks more than a pool node has: CPUs 64 > 32, memory 524288 MiB > 262144 MiB": [too_wide],
        "time limit over backfill's MaxTime": [too_long],
        "time limit over the 60 s grace, and not requeue-able": [not_requeueable],
        "waits on a dependency": [after_held],
    }
    run = pool.playbook("rebalance", handover_policy=DEMAND)
    assert not run.failed, run.failures()
    assert journals(pool) == {"int01": "free", "int02": "free"}
    # The same queue under lend_when idle: both idle nodes are lent.
    assert {d["node"] for d in plan(pool, lend_when="idle")["lend"]} == set(LENDABLE)


def test_as_many_nodes_as_the_waiting_jobs_need_are_lent_and_given_back_when_idle(
    clean_pool: Pool,
) -> None:
    pool = clean_pool
    first = pool.queue(time_limit={"set": True, "number": 10})
    result = plan(pool)
    assert result["slurm_demand"]["fitting_jobs"] == 1
    assert len(result["lend"]) == 1
    lent = result["lend"][0]["node"]
    assert result["lend"][0]["reason"] == f"for pending job(s) {first} of Slurm"
    other = next(name for name in LENDABLE if name != lent)
    assert reasons(result)[other] == "free; no job waiting in Slurm needs it"

    run = pool.playbook("rebalance", handover_policy=DEMAND)
    assert not run.failed, run.failures()
    assert journals(pool) == {lent: "lent", other: "free"}
    wait_until(lambda: "RUNNING" in pool.job(first)["job_state"], 150, f"job {first} to run")
    assert pool.job(first)["nodes"] == lent

    # A two-node job: the lent node runs the first job, so only one idle node could be
    # had (the free one). The job would wait half-served: nothing is lent for it.
    pair = pool.queue(minimum_nodes=2, maximum_nodes=2, time_limit={"set": True, "number": 10})
    result = plan(pool)
    assert result["lend"] == []
    assert result["slurm_demand"]["unplaced_jobs"] == [pair]
    assert reasons(result)[other] == (
        f"kept free: job(s) {pair} need more nodes than this run can lend"
    )

    # Once the first job is gone, the lent node is idle in Slurm: with the pair still
    # waiting it is used, and the free one is lent for the pair's second node.
    pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{first}")
    wait_until(lambda: idle(pool, lent), 60, f"{lent} to be IDLE")
    result = plan(pool)
    assert [d["node"] for d in result["lend"]] == [other], result["slurm_demand"]
    assert result["slurm_demand"]["lent_nodes_used"] == [lent]
    run = pool.playbook("rebalance", handover_policy=DEMAND)
    assert not run.failed, run.failures()
    # slurmctld starts the pair at its next scheduling pass once the node has registered:
    # within sched_interval (60 s) or backfill's bf_interval (30 s), later on a loaded
    # machine, or after the operator replaced a pod it had not seen registered.
    wait_until(lambda: "RUNNING" in pool.job(pair)["job_state"], 150, f"job {pair} to run")

    # With the queue empty again the idle lent nodes stay lent (the default), or go back
    # with demand_return_idle_s (0 here: at once).
    pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{pair}")
    for name in LENDABLE:
        wait_until(lambda n=name: idle(pool, n), 60, f"{name} to be IDLE")
    assert plan(pool)["reclaim"] == []
    returning = {**DEMAND, "demand_return_idle_s": 0}
    result = plan(pool, demand_return_idle_s=0)
    assert sorted(d["node"] for d in result["reclaim"]) == sorted(LENDABLE)
    assert all(d["reason"].startswith("idle in Slurm") for d in result["reclaim"])
    run = pool.playbook("rebalance", handover_policy=returning)
    assert not run.failed, run.failures()
    assert journals(pool) == {"int01": "free", "int02": "free"}


def test_a_job_within_the_nodes_allocatable_but_over_slurmds_limits_is_not_lent_for(
    clean_pool: Pool,
) -> None:
    """int01 and int02 have 32 CPUs allocatable; with the interactive NodeSet's slurmd
    limited to 8, Slurm would get 8 CPUs of a lent node (POD_CPUS: the image's entrypoint
    reserves the rest with CoreSpecCount), so a 16-CPU job would wait there for ever:
    nothing is lent for it, and the plan says why."""
    pool = clean_pool
    between = pool.queue(cpus_per_task=16, time_limit={"set": True, "number": 10})
    with slurmd_limits(pool, {"cpu": "8"}):
        result = plan(pool)
        assert result["lend"] == [] and result["reclaim"] == []
        demand = result["slurm_demand"]
        assert (demand["pending_jobs"], demand["fitting_jobs"]) == (1, 0)
        assert demand["skipped"] == [
            {
                "reason": "asks more than a pool node has: CPUs 16 > 8",
                "jobs": 1,
                "examples": [between],
            }
        ]
        assert reasons(result)["int01"] == "free; no job waiting in Slurm needs it"
        # A run (which reads the NodeSets for its check and its plan) lends nothing either.
        run = pool.playbook("rebalance", handover_policy=DEMAND)
        assert not run.failed, run.failures()
        assert journals(pool) == {"int01": "free", "int02": "free"}
    # Without the limit the job fits a node: the limit was the reason.
    result = plan(pool)
    assert [d["reason"] for d in result["lend"]] == [f"for pending job(s) {between} of Slurm"]
    assert result["slurm_demand"]["skipped"] == []
