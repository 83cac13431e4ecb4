# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover protocol against the lab: the real apiserver, scheduler, Slinky operator,
slurmctld, slurmrestd and a real slurmd per lent node, through the playbooks users run.

The pool and its fixtures are in handover_pool.py.  Every test starts and ends with the
pool free and clean.

What a real kubelet decides lives in molecule's handover scenario (kind), not here: a job
drained and given its grace, the requeue at the deadline, and runs stopped while the slurmd
container starts or stops, while its pod is Terminating or while a job still runs on the
drained node (molecule/handover/tests).  Here, a pod runs the instant it is bound and goes
the instant it is deleted.
"""

from __future__ import annotations

import json
import re
import subprocess
import typing as t

import pytest
from ansible_runner import (
    BIN,
    LAB_INVENTORY,
    ansible_env,
)
from handover_pool import FAULT_EXIT, LENDABLE, PLAYBOOKS, POLICY, Pool
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration


def results(run: t.Any) -> dict[str, str]:
    """node -> result of a node_handover task result."""
    return {n["node"]: n["result"] for n in run["nodes"]}


def test_lend_gives_idle_pool_nodes_to_slurm_and_leaves_the_rest(clean_pool: Pool) -> None:
    pool = clean_pool
    pool.app_pod("busy", {"kubernetes.io/hostname": "int02"}, cpu="1")
    wait_until(lambda: pool.running_on("busy") == "int02", 30, "the busy pod to run on int02")

    run = pool.playbook("rebalance")
    assert not run.failed, run.failures()
    # int01 is idle: lent; its slurmd (started by the operator) is IDLE in backfill.
    assert pool.journal("int01")["state"] == "lent"
    assert pool.marks("int01") == (True, True)
    assert pool.idle_slurm_node("int01")["partitions"] == ["backfill"]
    assert pool.events("int01") == ["HandoverLending", "HandoverLent"]
    # A node running an application pod, the never-touch GPU nodes and svc01 (outside the
    # pool) are left alone.
    for name in ("int02", "gpu01", "gpu02", "svc01"):
        assert pool.journal(name)["state"] == "free", name
        assert pool.marks(name) == (False, False), name
        assert pool.slurm_node(name) is None, name
    assert pool.running_on("busy") == "int02"

    # Named, they are refused, each with why; nothing changes on them. Never-touch and
    # out-of-pool nodes before the run takes the Lease, a busy node by the protocol.
    run = pool.playbook("lend", handover_nodes=["gpu01", "svc01"])
    assert run.failed
    message = " ".join(run.failures())
    assert "handover_nodes[0]: gpu01: matches never_touch_selector" in message
    assert "handover_nodes[1]: svc01: not in the lendable pool" in message
    run = pool.playbook("lend", handover_nodes=["int02"])
    assert run.failed
    assert "int02: refused: runs application pod(s) jupyterhub/busy" in " ".join(run.failures())
    for name in ("int02", "gpu01", "svc01"):
        assert pool.marks(name) == (False, False), name
        assert pool.events(name) == [], name

    # status.yml shows it, as a table and as JSON.
    status_file = pool.key_path.parent / "status.json"
    run = pool.playbook("status", handover_status_json_path=str(status_file))
    assert not run.failed, run.failures()
    assert run.changed == 1  # the JSON file; the run itself changes nothing
    rows = {row["node"]: row for row in json.loads(status_file.read_text())}
    assert rows["int01"]["journal"] == "lent" and "IDLE" in rows["int01"]["slurm"]
    assert rows["int02"]["app_pods"] == 1 and rows["int02"]["journal"] == "free"
    assert rows["gpu01"]["never_touch"] is True
    assert "svc01" not in rows
    # The table as the terminal shows it: one line per node, in columns (show_table).
    assert re.search(r"^int01 +Ready +0 +lent +\S+ +DYNAMIC_NORM\+IDLE +0 ", run.output, re.M)
    assert re.search(r"^gpu01 +Ready,never-touch +0 +free ", run.output, re.M)


def test_under_wait_no_job_is_touched_and_the_node_is_blocked(clean_pool: Pool) -> None:
    pool = clean_pool
    assert not pool.playbook("lend", handover_nodes=["int01"]).failed
    job_id = pool.submit("int01", 600)
    policy = {**POLICY, "partitions": {"backfill": {"grace_s": 2, "escalation": "wait"}}}
    run = pool.playbook("reclaim", handover_nodes=["int01"], handover_policy=policy)
    assert run.failed  # asked to reclaim it, the run did not: its outcome is `blocked`
    assert " ".join(run.failures()).startswith("blocked: int01: jobs [")
    assert '"int01": "blocked"' in run.output
    assert pool.job(job_id)["job_state"] == ["RUNNING"]
    assert pool.journal("int01")["state"] == "reclaiming"
    assert pool.marks("int01") == (True, True)  # still Slurm's: no application pod lands
    assert pool.events("int01")[-1] == "HandoverBlocked"
    slurm_node = pool.slurm_node("int01")
    assert slurm_node is not None and "DRAIN" in slurm_node["state"]
    assert slurm_node["reason"].startswith("hpcops: reclaim ")
    # The next run looks again: still blocked while the job runs, free once it ended.
    run = pool.playbook("rebalance", handover_policy={**policy, "max_changes_per_run": 1})
    assert not run.failed, run.failures()
    assert pool.job(job_id)["job_state"] == ["RUNNING"]
    pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job_id}")  # the user's scancel
    run = pool.playbook("rebalance", handover_policy={**policy, "max_changes_per_run": 1})
    assert not run.failed, run.failures()
    pool.assert_clean("int01")


def test_an_admins_drain_is_kept_and_the_node_comes_back_cordoned(clean_pool: Pool) -> None:
    """A lent node an admin drained in Slurm never goes back to the applications silently:
    status shows the reason before and after the reclaim, which keeps it in the journal, an
    Event and the run's summary, and leaves the Node cordoned (admin_drain: cordon)."""
    pool = clean_pool
    reason = "hw: ECC errors"
    assert not pool.playbook("lend", handover_nodes=["int01"]).failed
    pool.idle_slurm_node("int01")
    status, body = pool.slurm.request(
        "POST", f"/slurm/{pool.slurm.api}/node/int01", {"state": ["DRAIN"], "reason": reason}
    )
    assert status == 200 and not body.get("errors"), body

    def status_rows() -> tuple[dict[str, t.Any], str]:
        status_file = pool.key_path.parent / "status.json"
        run = pool.playbook("status", handover_status_json_path=str(status_file))
        assert not run.failed, run.failures()
        rows = {row["node"]: row for row in json.loads(status_file.read_text())}
        return rows["int01"], run.output

    row, output = status_rows()
    assert row["journal"] == "lent" and row["admin_drain"] == reason
    # The last column, CONDITION, is empty: an admin's drain is the admin's, not a disagreement.
    assert re.search(r"^int01 +Ready +0 +lent .* hw: ECC errors +-$", output, re.M)

    summary_file = pool.key_path.parent / "summary.json"
    run = pool.playbook(
        "reclaim", handover_nodes=["int01"], handover_summary_path=str(summary_file)
    )
    assert not run.failed, run.failures()
    summary = json.loads(summary_file.read_text())
    assert summary["outcome"] == "done" and summary["returned"] == ["int01"]
    assert summary["admin_drains"] == {"int01": reason}
    assert any(reason in warning for warning in summary["warnings"]), summary["warnings"]
    assert pool.node("int01")["spec"].get("unschedulable") is True
    assert pool.journal("int01")["state"] == "free"
    assert pool.journal("int01")["admin_drain"] == reason
    assert pool.marks("int01") == (False, False) and pool.slurm_node("int01") is None
    # Events of the same second come in any order.
    assert {"HandoverAdminDrain", "HandoverReturned"} <= set(pool.events("int01"))
    row, output = status_rows()
    assert not row["schedulable"] and row["admin_drain"] == reason
    assert re.search(r"^int01 +Ready,cordoned +0 +free .* hw: ECC errors +-$", output, re.M)

    # admin_drain: return gives the node back schedulable; the reason is still recorded.
    assert not pool.handover("lend", ["int02"]).failed
    pool.idle_slurm_node("int02")
    status, body = pool.slurm.request(
        "POST", f"/slurm/{pool.slurm.api}/node/int02", {"state": ["DRAIN"], "reason": reason}
    )
    assert status == 200 and not body.get("errors"), body
    policy = {"pool_selector": {"hpcops.io/pool": "interactive"}, **POLICY, "admin_drain": "return"}
    run = pool.handover("reclaim", ["int02"], policy=policy)
    assert not run.failed, run
    assert run["nodes"][0]["result"] == "free" and run["nodes"][0]["admin_drain"] == reason
    assert not pool.node("int02")["spec"].get("unschedulable")
    assert pool.journal("int02")["admin_drain"] == reason


def test_an_application_pod_bound_after_the_taint_rolls_the_lend_back(clean_pool: Pool) -> None:
    pool = clean_pool
    # The lend stops right after its first step (journal lending + taint), as if the
    # scheduler bound a pod in that moment: the pod is bound before the next step looks.
    crashed = pool.handover("lend", ["int01"], fault="lend:taint")
    assert crashed.failed
    assert pool.journal("int01")["state"] == "lending"
    pool.app_pod("raced", {"kubernetes.io/hostname": "int01"}, cpu="1", node="int01")
    wait_until(lambda: pool.running_on("raced") == "int01", 30, "the raced pod to run")

    run = pool.handover("lend", ["int01"])
    assert not run.failed, run
    assert results(run) == {"int01": "rolled_back"}
    assert "jupyterhub/raced" in run["nodes"][0]["message"]
    # The pod was never evicted; the node is the applications' again.
    assert pool.running_on("raced") == "int01"
    assert pool.journal("int01")["state"] == "free"
    assert pool.marks("int01") == (False, False)
    assert pool.slurm_node("int01") is None
    assert pool.events("int01") == ["HandoverLending", "HandoverRolledBack"]


def resume_run(pool: Pool) -> t.Any:
    """The next scheduled run, with a budget of one change: it only finishes the node."""
    run = pool.playbook("rebalance", handover_policy={**POLICY, "max_changes_per_run": 1})
    assert not run.failed, run.failures()
    return run


@pytest.mark.parametrize("step", ["taint", "recheck"])
def test_a_lend_stopped_after_any_step_is_finished_by_the_next_run(
    clean_pool: Pool, step: str
) -> None:
    pool = clean_pool
    crashed = pool.handover("lend", ["int01"], fault=f"lend:{step}")
    assert crashed.failed and crashed.get("rc") == FAULT_EXIT, crashed
    assert pool.journal("int01")["state"] == "lending"
    resume_run(pool)
    assert pool.journal("int01")["state"] == "lent"
    assert pool.marks("int01") == (True, True)
    pool.idle_slurm_node("int01")
    assert pool.events("int01") == ["HandoverLending", "HandoverLent"]
    assert pool.journal("int02")["state"] == "free"  # the budget went to finishing int01


@pytest.mark.parametrize("step", ["journal", "drained"])
def test_a_reclaim_stopped_after_any_step_is_finished_by_the_next_run(
    clean_pool: Pool, step: str
) -> None:
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    crashed = pool.handover("reclaim", ["int01"], fault=f"reclaim:{step}")
    assert crashed.failed and crashed.get("rc") == FAULT_EXIT, crashed
    assert pool.journal("int01")["state"] == "reclaiming"
    resume_run(pool)
    # No stray taint, label, journal, slurmd or (DOWN) Slurm node.
    pool.assert_clean("int01")
    assert pool.events("int01")[-2:] == ["HandoverReclaiming", "HandoverReturned"]
    assert pool.journal("int02")["state"] == "free"


def test_two_rebalance_runs_started_together_one_acts(clean_pool: Pool) -> None:
    pool = clean_pool
    extra = pool.key_path.parent / "rebalance-vars.json"
    extra.write_text(json.dumps({"handover_policy": POLICY}))
    command = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(LAB_INVENTORY),
        str(PLAYBOOKS / "rebalance.yml"),
        "-e",
        f"@{extra}",
    ]
    runs = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ansible_env()
        )
        for _run in range(2)
    ]
    reports = [json.loads(run.communicate(timeout=600)[0]) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]

    def run_result(report: dict[str, t.Any]) -> dict[str, t.Any]:
        for play in report["plays"]:
            for task in play["tasks"]:
                if task["task"]["name"].endswith(
                    ": Do the run, from the checks against the cluster to its record"
                ):
                    result: dict[str, t.Any] = task["hosts"]["localhost"]
                    return result
        raise AssertionError("no handover_run task in the run")

    results = [run_result(report) for report in reports]
    lent = [sorted(result.get("summary", {}).get("lent", [])) for result in results]
    # One run lent both nodes. The other was kept off by the Lease while the first held it,
    # or (on a loaded machine, its start seconds later) took the Lease once the first had
    # given it back and found nothing left to lend: either way it changed nothing.
    assert sorted(lent) == [[], sorted(LENDABLE)], lent
    other = lent.index([])
    assert reports[other]["stats"]["localhost"]["changed"] == 0, results[other]
    print(f"the other run: Lease acquired {results[other]['lease']['acquired']}")
    # The winner lent both idle nodes, once each.
    for name in LENDABLE:
        assert pool.journal(name)["state"] == "lent"
        assert pool.events(name) == ["HandoverLending", "HandoverLent"]


def test_workers_sharing_their_slurm_reads_lend_and_reclaim_together(clean_pool: Pool) -> None:
    """With shared reads (the default from 4 nodes at once; from 2 here, the pool's size)
    each worker still sees its own drain, registration and deletion."""
    pool = clean_pool
    run = pool.handover("lend", list(LENDABLE), shared_reads_from=2)
    assert not run.failed, run
    assert results(run) == dict.fromkeys(LENDABLE, "lent")
    for name in LENDABLE:
        pool.idle_slurm_node(name)
    job_id = pool.submit("int01", 4)
    run = pool.handover("reclaim", list(LENDABLE), shared_reads_from=2)
    assert not run.failed, run
    assert results(run) == dict.fromkeys(LENDABLE, "free")
    job = pool.job(job_id)  # drained, waited for, not killed
    assert job["job_state"] == ["COMPLETED"], (
        job["job_state"],
        job.get("restart_cnt"),
        job.get("state_reason"),
        pool.pods_the_operator_replaced(),
    )
    for name in LENDABLE:
        pool.assert_clean(name)


def test_a_bad_module_argument_names_itself(pool: Pool) -> None:
    run = pool.handover("reclaim", list(LENDABLE), shared_reads_from=-1)
    assert run.failed
    assert "shared_reads_from: -1 is below 0" in run["msg"], run
    assert "give a number of nodes, or 0 to never share" in run["msg"]


def test_check_mode_reports_the_steps_and_changes_nothing(clean_pool: Pool) -> None:
    run = clean_pool.playbook("lend", handover_nodes=["int01"], check=True)
    assert not run.failed, run.failures()
    assert '"would taint"' in run.output and '"would registered"' in run.output
    clean_pool.assert_clean("int01")
    assert clean_pool.events("int01") == []
    lease = clean_pool.lab.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/slurm/leases/hpcops-slinky-handover"
    )
    assert lease[0] == 404  # check mode took no Lease either


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"handover_policy": "headroom=2"}, "handover_policy: give a mapping"),
        ({"handover_nodes": "int01"}, "handover_nodes: give a list"),
        ({"handover_lease_duration_s": 60}, "handover_lease_duration_s: 60 s is shorter"),
        (
            {
                "handover_policy": {
                    **POLICY,
                    "partitions": {"backfill": {"grace_s": 5, "escalation": "kill"}},
                }
            },
            "handover_policy.partitions.backfill.escalation: 'kill' is not a known escalation",
        ),
        ({"handover_policy": {**POLICY, "headroom": -1}}, "headroom: -1 is negative"),
    ],
)
def test_bad_settings_stop_with_the_setting_and_the_fix(
    pool: Pool, extra: dict[str, t.Any], message: str
) -> None:
    run = pool.playbook("rebalance", **extra)
    assert run.failed
    assert message in " ".join(run.failures()), run.failures()
    assert "Traceback" not in run.output
    for name in LENDABLE:
        assert pool.marks(name) == (False, False)
