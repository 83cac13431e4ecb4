# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The pure steps of the handover: journal, Node patches, pods, Slurm states, escalation.

Slurm nodes and jobs are the ones recorded from the real slurmrestd (fake_slurmrestd's
recordings), normalised as the modules see them.
"""

from __future__ import annotations

import json
import typing as t

import pytest
from fake_slurmrestd import SUPPORTED_RECORDED, recording

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    Journal,
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
    application_pods,
    escalation,
    grace_deadline,
    has_label,
    has_taint,
    journal_of,
    journal_text,
    named_node_refusals,
    node_patch,
    pool_refusal,
    registration,
    runs_slurmd,
    slurm_drained,
    slurm_node_name,
    transition,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    normalize_job,
    normalize_node,
)

MARKERS = HandoverMarkers()
POLICY = Policy(
    pool_selector={"hpcops.io/pool": "interactive"},
    never_touch_selector={"hpcops.io/never-touch": "true"},
    partitions={
        "backfill": PartitionPolicy(300, "requeue"),
        "scavenger": PartitionPolicy(60, "cancel"),
        "long": PartitionPolicy(900, "wait"),
    },
)


def k8s_node(
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    journal: str | None = None,
) -> dict[str, t.Any]:
    return {
        "metadata": {
            "name": "int01",
            "resourceVersion": "42",
            "labels": {"hpcops.io/pool": "interactive", **(labels or {})},
            "annotations": {MARKERS.journal_annotation: journal} if journal else {},
        },
        "spec": {"taints": taints or []},
    }


def pod(
    name: str, *, owner: str = "", namespace: str = "apps", phase: str = "Running", **labels: str
) -> dict[str, t.Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{"kind": owner, "name": "x"}] if owner else [],
        },
        "spec": {"nodeName": "int01", "containers": []},
        "status": {"phase": phase},
    }


def recorded_nodes(release: str, version: str) -> dict[str, dict[str, t.Any]]:
    _status, body = recording(release, version, "nodes")
    return {node["name"]: normalize_node(node) for node in body["nodes"]}


def test_journal_round_trips_and_keeps_last_reclaim() -> None:
    before = Journal(state="free", last_reclaim=100.0, idle_since=50.0)
    after = transition(before, "reclaiming", "op1", 200.0, "run-a", "demand", 500.0)
    parsed = Journal.parse(journal_text(after))
    assert parsed == after
    assert parsed.last_reclaim == 100.0  # outlives the handover
    assert parsed.idle_since is None  # idle time starts again when the node is free
    assert json.loads(journal_text(after)) == {
        "state": "reclaiming",
        "op": "op1",
        "since": 200.0,
        "by": "run-a",
        "reason": "demand",
        "deadline": 500.0,
        "last_reclaim": 100.0,
    }


def test_the_journal_keeps_when_a_loan_began_until_the_node_is_free() -> None:
    lending = transition(Journal(), "lending", "op1", 100.0, "run-a")
    assert lending.lent_at is None
    lent = transition(lending, "lent", "op1", 130.25, "run-a")
    assert lent.lent_at == 130.25
    reclaiming = transition(lent, "reclaiming", "op2", 900.0, "run-b", "demand", 1200.0)
    assert Journal.parse(journal_text(reclaiming)).lent_at == 130.25
    assert json.loads(journal_text(reclaiming))["lent_at"] == 130.25
    assert transition(reclaiming, "free", "op2", 950.0, "run-b").lent_at is None


def test_patch_carries_the_resource_version_and_keeps_other_taints() -> None:
    foreign = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    node = k8s_node(taints=[foreign])
    journal = transition(Journal(), "lending", "op1", 1.0, "run-a")
    patch = node_patch(node, MARKERS, journal=journal, taint=True)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["spec"]["taints"] == [foreign, MARKERS.taint]
    assert json.loads(patch["metadata"]["annotations"][MARKERS.journal_annotation])["state"] == (
        "lending"
    )
    assert "labels" not in patch["metadata"]  # None leaves a part alone

    lent = k8s_node(taints=[foreign, MARKERS.taint], labels={MARKERS.lend_label: "true"})
    assert has_taint(lent, MARKERS) and has_label(lent, MARKERS)
    untaint = node_patch(lent, MARKERS, taint=False, label=False)
    assert untaint["spec"]["taints"] == [foreign]
    assert untaint["metadata"]["labels"] == {MARKERS.lend_label: None}  # merge patch: remove


def test_a_node_given_back_loses_slurm_bridges_taint_too() -> None:
    # slurm-bridge taints a lent node (Slurm has a node of its name) and is slow to untaint it.
    bridge = {"key": "slinky.slurm.net/managed-node", "value": "slurm-bridge-scheduler",
              "effect": "NoExecute"}  # fmt: skip
    lent = k8s_node(taints=[MARKERS.taint, bridge], labels={MARKERS.lend_label: "true"})
    assert node_patch(lent, MARKERS, taint=False)["spec"]["taints"] == []
    # A lend keeps it: Slurm is about to have the node.
    assert node_patch(lent, MARKERS, taint=True)["spec"]["taints"] == [bridge, MARKERS.taint]


def test_journal_of_a_node() -> None:
    assert journal_of(k8s_node(), MARKERS).state == "free"
    assert journal_of(k8s_node(journal='{"state": "lent", "op": "x"}'), MARKERS).op == "x"
    assert journal_of(k8s_node(journal="{oops"), MARKERS).state == "corrupt"


def test_pool_refusal_names_the_selector() -> None:
    assert pool_refusal(k8s_node(), POLICY) is None
    outside = k8s_node()
    outside["metadata"]["labels"] = {"hpcops.io/pool": "services"}
    assert "not in the lendable pool" in str(pool_refusal(outside, POLICY))
    never = k8s_node(labels={"hpcops.io/never-touch": "true"})
    assert pool_refusal(never, POLICY) == "matches never_touch_selector"


def test_named_nodes_are_refused_before_the_run_the_same_way_for_lend_and_reclaim() -> None:
    outside = k8s_node()
    outside["metadata"]["labels"] = {"hpcops.io/pool": "services"}
    never = k8s_node(labels={"hpcops.io/never-touch": "true"})
    # Lent, then relabelled out of the pool: still ours to bring back.
    lent_outside = k8s_node(journal='{"state": "lent", "op": "x"}')
    lent_outside["metadata"]["labels"] = {}
    # Came back without the journal, with the lend label: slurmd may run there, ours too.
    labelled_outside = k8s_node()
    labelled_outside["metadata"]["labels"] = {"hpcops.io/slurm-lent": "true"}
    found = {
        "int01": k8s_node(),
        "svc01": outside,
        "gpu01": never,
        "int09": lent_outside,
        "gone": None,
        "int08": labelled_outside,
    }
    problems = named_node_refusals(
        ["int01", "svc01", "gpu01", "int09", "gone", "int08"], found, POLICY, MARKERS
    )
    assert problems == [
        "handover_nodes[1]: svc01: not in the lendable pool (pool_selector "
        "{'hpcops.io/pool': 'interactive'}); name a node of the lendable pool",
        "handover_nodes[2]: gpu01: matches never_touch_selector; name a node of the lendable pool",
        "handover_nodes[4]: gone: no such Node; name a node of the lendable pool",
    ]


def test_application_pods_leave_out_slurmd_daemonsets_system_and_finished_pods() -> None:
    pods = [
        pod("notebook"),
        pod("done", phase="Succeeded"),
        pod("slurmd", owner="NodeSet", namespace="slurm"),
        pod("exporter", owner="DaemonSet"),
        pod("dns", namespace="kube-system"),
        pod("waiting", phase="Pending"),
    ]
    assert application_pods(pods, POLICY) == ["apps/notebook", "apps/waiting"]


def test_a_slurmd_pod_holds_its_node_until_its_kubelet_writes_a_terminal_phase() -> None:
    # A terminating pod (deletionTimestamp, phase still Running) may run slurmd yet.
    terminating = pod("slurm-worker-int01", owner="NodeSet", namespace="slurm")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-30T03:00:00Z"
    assert runs_slurmd(terminating)
    assert runs_slurmd(pod("slurmd", owner="NodeSet", namespace="slurm", phase="Pending"))
    for phase in ("Succeeded", "Failed"):
        assert not runs_slurmd(pod("slurmd", owner="NodeSet", namespace="slurm", phase=phase))
    # Application pods are not slurmd's, whatever their phase.
    assert not runs_slurmd(pod("notebook"))
    # A stopped slurmd pod still names the Slurm node (a resumed reclaim deletes its record).
    stopped = pod("slurm-worker-x", owner="NodeSet", namespace="slurm", phase="Succeeded")
    stopped["metadata"]["labels"]["nodeset.slinky.slurm.net/pod-hostname"] = "int01-slurm"
    assert slurm_node_name("int01", [stopped]) == "int01-slurm"


def test_slurm_node_name_comes_from_the_operator_label() -> None:
    slurmd = pod("slurm-worker-x", owner="NodeSet", namespace="slurm")
    slurmd["metadata"]["labels"]["nodeset.slinky.slurm.net/pod-hostname"] = "int01-slurm"
    assert slurm_node_name("int01", [pod("notebook"), slurmd]) == "int01-slurm"
    assert slurm_node_name("int01", [pod("notebook")]) == "int01"


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_slurm_states_from_the_real_slurmrestd(release: str, version: str) -> None:
    nodes = recorded_nodes(release, version)
    # cpu01 runs a job (MIXED), cpu02 is IDLE, cpu03 is drained with our reason.
    assert registration(nodes["cpu02"]) == "registered"
    assert registration(nodes["cpu01"]) == "registered"
    assert not slurm_drained(nodes["cpu01"])
    assert not slurm_drained(nodes["cpu02"])  # idle, but nothing keeps jobs off it
    assert slurm_drained(nodes["cpu03"])
    assert slurm_drained(None)  # no Slurm node: nothing to wait for
    assert registration(None) == "waiting"


def test_registration_sees_down_and_refused_nodes() -> None:
    base = {"state": "IDLE", "state_flags": [], "reason": ""}
    assert registration({**base, "state": "DOWN"}) == "waiting"
    assert registration({**base, "state_flags": ["NOT_RESPONDING"]}) == "waiting"
    refused = {**base, "state_flags": ["DRAIN", "INVALID_REG"], "reason": "gres/gpu count"}
    assert registration(refused) == "invalid"
    busy_drained = {"state": "MIXED", "state_flags": ["DRAIN"], "reason": "x"}
    assert not slurm_drained(busy_drained)
    assert not slurm_drained({"state": "IDLE", "state_flags": ["DRAIN", "COMPLETING"]})
    assert slurm_drained({"state": "DOWN", "state_flags": [], "reason": "x"})


def job(
    job_id: int, partition: str, *, requeue: bool = True, batch: bool = True
) -> dict[str, t.Any]:
    return {"job_id": job_id, "partition": partition, "requeue": requeue, "batch": batch}


def test_escalation_requeues_cancels_and_never_touches_wait_jobs() -> None:
    assert escalation([job(2, "backfill"), job(1, "scavenger")], POLICY).report() == {
        "cancelled": [1],
        "requeued": [2],
        "ended_not_requeueable": [],
        "waiting": [],
        "left_running": [],
    }
    # A job that Slurm cannot requeue ends with the DOWN; it is reported, not hidden.
    lost = escalation([job(3, "backfill", requeue=False), job(4, "backfill", batch=False)], POLICY)
    assert lost.down and lost.report()["ended_not_requeueable"] == [3, 4]
    # DOWN would end a `wait` job too: the node is not marked DOWN while one runs.
    waiting = escalation([job(5, "long"), job(6, "backfill"), job(7, "scavenger")], POLICY)
    assert waiting.blocked and not waiting.down
    assert waiting.report() == {
        "cancelled": [7],
        "requeued": [],
        "ended_not_requeueable": [],
        "waiting": [5],
        "left_running": [6],
    }
    nothing = escalation([], POLICY)
    assert not nothing.down and not nothing.blocked


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_escalation_of_recorded_jobs(release: str, version: str) -> None:
    _status, body = recording(release, version, "jobs")
    running = [normalize_job(j) for j in body["jobs"] if "RUNNING" in j["job_state"]]
    assert [j["partition"] for j in running] == ["batch"]
    # batch is not in the policy: the default escalation (requeue) applies.
    decided = escalation(running, POLICY)
    assert decided.down and decided.report()["requeued"] == [running[0]["job_id"]]


def test_grace_is_the_longest_of_the_node_partitions() -> None:
    assert grace_deadline(["backfill", "scavenger"], POLICY, 1000.0) == 1300.0
    assert grace_deadline([], POLICY, 1000.0) == 1000.0 + POLICY.default_partition.grace_s
