# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Histories the runs did not write (issue 41): each node's owner comes from all the
evidence, not from its journal alone.

A lent Node deleted and restored with our marks (an admin's saved object) or registered
again by its kubelet (its own labels, the lent label among them, none of our annotations or
taints), with and without a running job; a lent node relabelled out of the pool; the Slinky
operator draining a lent node. Each test ends with the node in one owner's hands, nothing
lost (the job completed or requeued, the application pod running) and the condition named
in status, in the run's summary and in an Event.

The same real apiserver, scheduler, Slinky operator and Slurm 26.05 as test_handover.py;
the pool and its fixtures are in handover_pool.py.
"""

from __future__ import annotations

import json
import re
import typing as t
from pathlib import Path

import pytest
from handover_pool import JOURNAL, LEND_LABEL, MERGE, POLICY, TAINT, Pool
from k8s_lab import NODES
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration

# No lend of the other node while a test looks at one, and a short grace: a job that
# outlives it is requeued (the lab's jobs may be).
QUIET = {
    **POLICY,
    "max_lent": 1,
    "partitions": {"backfill": {"grace_s": 5, "escalation": "requeue"}},
}
# Where a job ends when a node it ran on is given back: completed, or back in the queue.
NOTHING_LOST = ({"COMPLETED"}, {"PENDING"}, {"REQUEUED"}, {"PENDING", "REQUEUED"})


# -- histories -------------------------------------------------------------------------


def delete_node(pool: Pool, name: str) -> dict[str, t.Any]:
    """Delete the lent Node (as a machine retired), and its slurmd pods with it (the pod
    garbage collector would take a minute); the Node as it was."""
    saved: dict[str, t.Any] = pool.node(name)
    status, body = pool.lab.request("DELETE", f"/api/v1/nodes/{name}")
    assert status == 200, body
    for pod in pool.slurmd_pods(name):
        pool.lab.request("DELETE", f"/api/v1/namespaces/slurm/pods/{pod}?gracePeriodSeconds=0")
    wait_until(lambda: not pool.slurmd_pods(name), 60, f"the slurmd pod of {name} to go")
    return saved


def bring_back(
    pool: Pool,
    name: str,
    *,
    saved: dict[str, t.Any] | None = None,
    labels: dict[str, str] | None = None,
) -> None:
    """The Node again: restored from the saved object by an admin (our journal, label and
    taint with it), or registered by its kubelet (the lab's labels, and `labels` of the
    kubelet's own configuration; none of our annotations or taints)."""
    manifest = next(node.manifest() for node in NODES if node.name == name)
    if saved is not None:
        manifest["metadata"]["labels"] = saved["metadata"].get("labels") or {}
        manifest["metadata"]["annotations"] = saved["metadata"].get("annotations") or {}
        manifest["spec"] = {"taints": saved["spec"].get("taints") or []}
    else:
        manifest["metadata"]["labels"] |= labels or {}
    pool.lab.apply("/api/v1/nodes", manifest)
    pool.wait_ready(name)


def drain_as_orphan(pool: Pool, name: str) -> None:
    """The record drained as rebalance's orphan clean-up drains it while the Node is gone."""
    status, body = pool.slurm.request(
        "POST",
        f"/slurm/{pool.slurm.api}/node/{name}",
        {"state": ["DRAIN"], "reason": "hpcops: orphan: its Kubernetes Node is gone"},
    )
    assert status == 200 and not body.get("errors"), body


def summary_of(path: Path) -> dict[str, t.Any]:
    summary: dict[str, t.Any] = json.loads(path.read_text())
    return summary


def assert_nothing_lost(pool: Pool, job_id: int | None) -> None:
    if job_id is None:
        return
    record = pool.job(job_id)
    state = set(record["job_state"])
    assert state in [set(s) for s in NOTHING_LOST], record["job_state"]
    if "COMPLETED" not in state:
        assert record["restart_cnt"] >= 1, record


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of hpcops_slinky_handover_<name> with these labels (others may be there too:
    the site's, such as cluster) in a Prometheus text file; None when it has no such sample."""
    for line in text.splitlines():
        found = re.match(rf"hpcops_slinky_handover_{name}(?:\{{(.*)\}})? (\S+)$", line)
        if found and all(f'{key}="{value}"' in (found[1] or "") for key, value in labels.items()):
            return float(found[2])
    return None


def the_run(pool: Pool, tmp_path: Path, playbook: str = "rebalance", **extra: t.Any) -> t.Any:
    """A run with its summary and metrics written to tmp_path; (run, summary, metrics)."""
    summary = tmp_path / f"{playbook}-summary.json"
    metrics = tmp_path / f"{playbook}.prom"
    extra.setdefault("handover_policy", QUIET)
    run = pool.playbook(
        playbook,
        handover_summary_path=str(summary),
        handover_metrics_textfile_path=str(metrics),
        **extra,
    )
    assert not run.failed, run.failures()
    return run, summary_of(summary), metrics.read_text()


# -- the Node deleted and restored with our marks ---------------------------------------


@pytest.mark.parametrize("job", [True, False], ids=["running-job", "idle"])
def test_a_lent_node_restored_with_our_marks_over_its_drained_record_is_given_back(
    clean_pool: Pool, tmp_path: Path, job: bool
) -> None:
    """The journal says lent, the label and taint are back, slurmd registers again, and
    Slurm keeps the node drained as an orphan: journal_lent_drained_by_us. Seen: status's
    list stayed empty and rebalance said `no change`. Now status names it, the rebalance
    gives it back under the partition's grace, with an Event."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    saved = delete_node(pool, "int01")
    assert pool.slurm_node("int01") is not None
    drain_as_orphan(pool, "int01")
    bring_back(pool, "int01", saved=saved)
    assert pool.journal("int01")["state"] == "lent" and pool.marks("int01") == (True, True)
    # The operator starts slurmd again (the label selects the node). A dynamic node that
    # registers anew may come back without its drain; as the history had it, Slurm keeps
    # the node drained as an orphan: drained again once slurmd has registered, with the
    # job (started before the drain, so it runs on: a job from before the Node went is
    # one the new slurmd does not know, and slurmctld would end it when it will).
    wait_until(lambda: pool.slurmd_ready("int01"), 60, "slurmd on int01 again, Ready")
    # Whether the registration dropped the drain depends on timing (a CI run saw it kept
    # and the job pend as ReqNodeNotAvail): the history's drain-free step is made certain
    # by a resume, then the node is idle to Slurm and to the operator before the job.
    if "DRAIN" in (pool.slurm_node("int01") or {}).get("state", []):
        status, body = pool.slurm.request(
            "POST", f"/slurm/{pool.slurm.api}/node/int01", {"state": ["RESUME"]}
        )
        assert status == 200 and not body.get("errors"), body
    pool.idle_slurm_node("int01")
    job_id = pool.submit("int01", 600) if job else None
    drain_as_orphan(pool, "int01")
    wait_until(
        lambda: "DRAIN" in (pool.slurm_node("int01") or {}).get("state", []),
        30,
        "int01 drained in Slurm",
    )
    # A CI run saw the drain gone by the rebalance. Our reading of the operator's cordon sync
    # (nodeset_sync.go): it undrains a node when its cached view of Slurm shows no reason
    # of somebody else's, and that view may lag the drain. Once its pod condition shows the
    # drain, the view has our reason and the operator leaves the node alone.
    wait_until(
        lambda: pool.slurmd_condition("int01", "SlurmNodeStateDrain"),
        60,
        "the Slinky operator to see int01 drained",
        lambda: pool.slurm_node("int01"),
    )

    status = pool.playbook("status", handover_policy=QUIET)
    assert not status.failed, status.failures()
    assert "node int01: journal_lent_drained_by_us (journal lent" in status.output, (
        pool.slurm_node("int01"),
        status.output[-3000:],
    )
    assert "rebalance.yml re-taints it and gives it back to the applications" in status.output

    run, summary, metrics = the_run(pool, tmp_path)
    assert "int01 journal_lent_drained_by_us (given back)" in run.output, (
        pool.slurm_node("int01"),
        {key: summary.get(key) for key in ("outcome", "conditions", "nodes", "warnings")},
    )
    assert summary["conditions"] == {"int01": "journal_lent_drained_by_us"}
    assert summary["nodes"]["int01"] == "free" and "int01" in summary["returned"]
    assert metric(metrics, "conditions", condition="journal_lent_drained_by_us") == 1, metrics
    assert "HandoverCondition" in pool.events("int01")
    pool.assert_clean("int01")
    assert_nothing_lost(pool, job_id)


# -- the Node registered again by its kubelet, with the lent label and no journal -------


def test_a_node_back_without_journal_and_taint_with_a_job_and_an_app_pod_is_an_emergency(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """The kubelet registers the Node with the lent label of its own configuration; slurmd
    comes back and runs a job; with no taint, an application pod is scheduled
    beside it. Seen: status only counted the pod, rebalance lent the other node and wrote
    idle_since here. Now: slurm_and_apps, an emergency: the node is tainted again (no
    further pod lands), given back under the partition's grace (the job requeued, not
    killed before it), the pod keeps running; a Warning Event, the summary's first words
    and a metric say so."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    delete_node(pool, "int01")
    bring_back(pool, "int01", labels={LEND_LABEL: "true"})
    assert pool.journal("int01")["state"] == "free" and pool.marks("int01") == (True, False)
    # The job starts once the new slurmd has registered: one that ran before the Node went
    # is one its new slurmd does not know (another pod, another spool), and slurmctld
    # ends it at a moment of its own, between status and the run or not.
    wait_until(lambda: pool.slurmd_ready("int01"), 60, "slurmd on int01 again, Ready")
    job_id = pool.submit("int01", 600)
    pool.app_pod("beside", {"kubernetes.io/hostname": "int01"}, cpu="1")
    wait_until(lambda: pool.running_on("beside") == "int01", 30, "the pod to run on int01")

    status = pool.playbook("status", handover_policy=QUIET)
    assert not status.failed, status.failures()
    assert "EMERGENCY node int01: slurm_and_apps (journal free, lend label" in status.output

    run, summary, metrics = the_run(pool, tmp_path)
    assert "EMERGENCY slurm_and_apps on int01 (given back)" in run.output, {
        key: summary.get(key) for key in ("outcome", "conditions", "nodes", "warnings", "pool")
    }
    assert summary["emergencies"] == ["int01"]
    assert metric(metrics, "emergency_nodes") == 1, metrics
    assert summary["lent"] == []  # nothing new while the emergency is resolved
    assert "HandoverEmergency" in pool.events("int01")
    pool.assert_clean("int01")
    assert pool.running_on("beside") == "int01"
    assert_nothing_lost(pool, job_id)
    assert "idle_since" not in pool.journal("int01")


def test_a_node_back_without_journal_with_the_lent_label_and_slurmd_is_lent_again(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """No job, no application pod: slurmd_without_journal. The rebalance finishes the lend
    the evidence shows (journal and taint written, slurmd's registration awaited): the
    node is Slurm's again, fenced off."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    delete_node(pool, "int01")
    bring_back(pool, "int01", labels={LEND_LABEL: "true"})
    wait_until(lambda: pool.slurmd_pods("int01"), 60, "slurmd on int01 again")
    pool.idle_slurm_node("int01")

    status = pool.playbook("status", handover_policy=QUIET)
    assert not status.failed, status.failures()
    assert "node int01: slurmd_without_journal (journal free, lend label" in status.output

    run, summary, _metrics = the_run(pool, tmp_path)
    assert "int01 slurmd_without_journal (lent)" in run.output
    assert summary["conditions"] == {"int01": "slurmd_without_journal"}
    assert pool.journal("int01")["state"] == "lent"
    assert pool.marks("int01") == (True, True)
    assert {"HandoverCondition", "HandoverLent"} <= set(pool.events("int01"))
    # Slurm's again: it takes a job.
    job_id = pool.submit("int01", 5)
    wait_until(lambda: "COMPLETED" in pool.job(job_id)["job_state"], 60, "the job to end")


def test_a_named_reclaim_of_a_node_slurmd_runs_on_without_a_journal_reclaims_it(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """Seen: `reclaim.yml -e '{"handover_nodes": ["int01"]}'` answered `done: no change
    (pool: 4 free)` while slurmd ran there. A named reclaim gives the node back."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 600)
    delete_node(pool, "int01")
    bring_back(pool, "int01", labels={LEND_LABEL: "true"})
    wait_until(lambda: pool.slurmd_pods("int01"), 60, "slurmd on int01 again")

    run, summary, _metrics = the_run(pool, tmp_path, "reclaim", handover_nodes=["int01"])
    assert "no change" not in run.output
    assert summary["outcome"] == "done" and summary["returned"] == ["int01"]
    pool.assert_clean("int01")
    assert_nothing_lost(pool, job_id)


# -- a lent node relabelled out of the pool ---------------------------------------------


def test_a_lent_node_relabelled_out_of_the_pool_is_shown_until_given_back_by_name(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """Seen: status dropped it from its table, rebalance counted `1 lent` with no warning.
    Now: status keeps it (left the pool), every rebalance warns with the named reclaim to
    run, and that reclaim gives it back."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 600)
    pool.lab.request(
        "PATCH",
        "/api/v1/nodes/int01",
        {"metadata": {"labels": {"hpcops.io/pool": "batch"}}},
        content_type=MERGE,
    )
    try:
        status = pool.playbook("status", handover_policy=QUIET)
        assert not status.failed, status.failures()
        # The table's row keeps it, marked.
        assert "left_the_pool -> person; left the pool" in status.output
        hint = """reclaim.yml -e '{"handover_nodes": ["int01"]}'"""
        assert "node int01: left_the_pool (journal lent" in status.output
        # The playbook's output is JSON: the hint's double quotes are escaped there.
        assert json.dumps(hint)[1:-1] in status.output

        _run, summary, _metrics = the_run(pool, tmp_path)
        assert summary["conditions"] == {"int01": "left_the_pool"}
        assert any("left_the_pool" in w and hint in w for w in summary["warnings"])
        assert pool.journal("int01")["state"] == "lent"  # a person's call, not the run's

        _run, summary, _metrics = the_run(pool, tmp_path, "reclaim", handover_nodes=["int01"])
        assert summary["returned"] == ["int01"]
        assert pool.journal("int01")["state"] == "free" and pool.marks("int01") == (False, False)
        assert pool.slurm_node("int01") is None
        assert_nothing_lost(pool, job_id)
        status = pool.playbook("status", handover_policy=QUIET)
        assert "left_the_pool" not in status.output
    finally:
        pool.lab.request(
            "PATCH",
            "/api/v1/nodes/int01",
            {"metadata": {"labels": {"hpcops.io/pool": "interactive"}}},
            content_type=MERGE,
        )


# -- the Slinky operator drains a lent node ---------------------------------------------


def test_a_lent_node_the_slinky_operator_drains_is_named_with_its_reason_and_given_back(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """The operator drains a lent node for its own reasons while the journal says lent (a
    person cordoned the Node, and the operator drains the Slurm node of its slurmd pod; a
    pod cordoned alone is uncordoned by the operator on its next pass, as the Node is not):
    drained_by_operator, shown with the operator's reason, and given back under the grace,
    left cordoned for the person who cordoned it."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    pool.idle_slurm_node("int01")
    cordon = {"spec": {"unschedulable": True}}
    pool.lab.request("PATCH", "/api/v1/nodes/int01", cordon, content_type=MERGE)

    def operator_drain() -> str:
        record = pool.slurm_node("int01") or {}
        reason = str(record.get("reason") or "")
        return (
            reason
            if "DRAIN" in record.get("state", []) and reason.startswith("slurm-operator:")
            else ""
        )

    reason = wait_until(operator_drain, 90, "the Slinky operator to drain int01")
    status = pool.playbook("status", handover_policy=QUIET)
    assert not status.failed, status.failures()
    assert f"drained by Slinky: {reason}" in status.output
    assert "node int01: drained_by_operator (journal lent" in status.output

    try:
        run, summary, _metrics = the_run(pool, tmp_path)
        assert "int01 drained_by_operator (given back)" in run.output
        assert summary["conditions"] == {"int01": "drained_by_operator"}
        assert "HandoverCondition" in pool.events("int01")
        assert pool.node("int01")["spec"].get("unschedulable") is True
    finally:
        uncordon = {"spec": {"unschedulable": None}}
        pool.lab.request("PATCH", "/api/v1/nodes/int01", uncordon, content_type=MERGE)
    pool.assert_clean("int01")


# -- the journal's taint missing on a lent node -----------------------------------------


def test_a_lent_node_that_lost_its_taint_is_given_back_before_a_pod_lands(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """Somebody removed the lent taint (a `kubectl taint ... -` too many):
    journal_lent_no_taint. The rebalance puts it on again in its first patch and gives the
    node back."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    pool.lab.request("PATCH", "/api/v1/nodes/int01", {"spec": {"taints": None}}, content_type=MERGE)
    assert pool.marks("int01") == (True, False)
    run, summary, _metrics = the_run(pool, tmp_path)
    assert summary["conditions"] == {"int01": "journal_lent_no_taint"}
    assert "int01 journal_lent_no_taint (given back)" in run.output
    pool.assert_clean("int01")
    assert JOURNAL in pool.node("int01")["metadata"].get("annotations", {})
    assert TAINT not in json.dumps(pool.node("int01")["spec"].get("taints") or [])
