# SPDX-License-Identifier: GPL-3.0-or-later
"""Lend and reclaim on real kubelets: molecule's verify of the handover scenario.

Two kind workers form the interactive pool. The checks run the collection's playbooks as a
user does (ansible-playbook with inventories/kind), against slurmd containers the Slinky
operator starts and stops through a real kubelet, and real Slurm jobs. Each run that is
stopped after a step (HPCOPS_HANDOVER_FAULT: the module exits there, as a crash would) is
stopped where a real kubelet is still at work: the slurmd container starting, the slurmd
container stopping, the pod Terminating, a job still running on a drained node. The next
run must finish the node, and leave no taint, label, journal or Slurm node behind, and no
application pod Pending while its node is free.

The tests share one cluster and run in order; each leaves the pool free.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kind_cluster import (
    ENDED,
    INVENTORY,
    NAMESPACE,
    REPO,
    configured,
    job,
    kubectl,
    kubectl_json,
    slurm_nodes,
    slurmrestd,
    submit,
    token,
    wait,
    wait_for_state,
)

APP_IMAGE = os.environ.get("HPCOPS_KIND_APP_IMAGE", "")
APPS = "apps"
PREFIX = "hpcops.io"
JOURNAL = f"{PREFIX}/handover"
LEND_LABEL = f"{PREFIX}/slurm-lent"
TAINT = f"{PREFIX}/lent"
PARTITION = "backfill"
GRACE_S = 10
FAULT_EXIT = 75  # node_handover's exit when it is stopped after a step
# The scenario's policy: nothing waits for idle time or cool-down, no headroom.
POLICY = {
    "lend_min_idle_s": 0,
    "relend_cooldown_s": 0,
    "headroom": 0,
    "partitions": {PARTITION: {"grace_s": GRACE_S, "escalation": "requeue"}},
}

pytestmark = pytest.mark.skipif(
    not configured(), reason="run by molecule verify (molecule/shared/verify_handover.yml)"
)


# -- the playbooks -------------------------------------------------------------------------


@dataclass
class Run:
    rc: int
    output: str
    summary: dict[str, Any] = field(default_factory=dict)
    status: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


class Started:
    """playbooks/<name>.yml on the kind inventory, as a user runs it, under way."""

    def __init__(
        self,
        name: str,
        tmp: Path,
        *,
        nodes: list[str] | None = None,
        fault: str = "",
        policy: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        self.name, self.label = name, f"{name}.yml {nodes or ''} {fault}".rstrip()
        # Each run its own files: two may be under way at once.
        self.files = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
        self.summary, self.status = self.files / "summary.json", self.files / "status.json"
        extra.update(
            handover_policy=policy or POLICY,
            handover_summary_path=str(self.summary),
            handover_status_json_path=str(self.status),
        )
        if nodes is not None:
            extra["handover_nodes"] = nodes
        (self.files / "extra.json").write_text(json.dumps(extra))
        env = dict(os.environ, ANSIBLE_NOCOLOR="true")
        env.pop("HPCOPS_HANDOVER_FAULT", None)
        if fault:
            # A run stopped on purpose exits without removing its module's payload from
            # TMPDIR: keep it with the run's files, not in /tmp.
            env.update(HPCOPS_HANDOVER_FAULT=fault, TMPDIR=str(self.files))
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ansible-playbook"),
                "-i",
                str(INVENTORY),
                str(REPO / "playbooks" / f"{name}.yml"),
                "-e",
                f"@{self.files / 'extra.json'}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )

    def finish(self) -> Run:
        output = self.process.communicate(timeout=600)[0]
        run = Run(self.process.returncode, output, seconds=time.monotonic() - self.started)
        if self.summary.exists():
            run.summary = json.loads(self.summary.read_text())
        if self.status.exists():
            run.status = json.loads(self.status.read_text())
        assert token() not in run.output, "a Slurm token in the playbook's output"
        print(f"{self.label}: rc {run.rc} in {run.seconds:.1f} s")
        return run


def playbook(name: str, tmp: Path, **options: Any) -> Run:
    return Started(name, tmp, **options).finish()


def assert_stopped(run: Run) -> None:
    """The run failed where the fault stopped its module, and recorded that it failed."""
    assert f'"rc": {FAULT_EXIT}' in run.output, succeeded(run)
    assert run.rc != 0 and run.summary["outcome"] == "failed", succeeded(run)


def succeeded(run: Run) -> str:
    """The assertion message of a run that should have worked: its end."""
    return "\n".join(run.output.splitlines()[-40:])


# -- Kubernetes and Slurm ------------------------------------------------------------------


def node(name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl_json("get", "node", name)
    return found


def journal(name: str) -> dict[str, Any]:
    text = (node(name)["metadata"].get("annotations") or {}).get(JOURNAL)
    return json.loads(text) if text else {"state": "free"}


def marks(name: str) -> tuple[bool, bool]:
    """(lend label, lent taint) on the Node."""
    found = node(name)
    label = (found["metadata"].get("labels") or {}).get(LEND_LABEL) == "true"
    taint = any(t["key"] == TAINT for t in found["spec"].get("taints") or [])
    return label, taint


def slurmd_pods(name: str) -> list[dict[str, Any]]:
    """The slurmd pods on a node, Terminating ones too."""
    pods: list[dict[str, Any]] = kubectl_json(
        "get", "pods", "-n", NAMESPACE, "--field-selector", f"spec.nodeName={name}"
    )["items"]
    return [
        p for p in pods if any(o["kind"] == "NodeSet" for o in p["metadata"]["ownerReferences"])
    ]


def live_slurmd_pods(name: str) -> list[dict[str, Any]]:
    """The slurmd pods on a node that may still run something: a pod in a terminal phase
    (every container and the sandbox stopped) holds nothing while its kubelet cleans up."""
    return [p for p in slurmd_pods(name) if p["status"].get("phase") not in ("Succeeded", "Failed")]


def slurmd_running(name: str) -> bool:
    pods = live_slurmd_pods(name)
    return bool(pods) and all(
        not p["metadata"].get("deletionTimestamp")
        and any(
            c["name"] == "slurmd" and "running" in c.get("state", {})
            for c in p["status"].get("containerStatuses") or []
        )
        for p in pods
    )


def app_pod(name: str, on: str) -> None:
    """An application pod (as JupyterHub spawns one) that only `on` can run."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APPS, "labels": {"app": "notebook"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": on},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "notebook",
                    "image": APP_IMAGE,
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                }
            ],
        },
    }
    subprocess.run(
        ["kubectl", "apply", "-f", "-"], input=json.dumps(manifest), text=True, check=True
    )


def app_phase(name: str) -> tuple[str, str]:
    """(phase, node) of an application pod."""
    pod = kubectl_json("get", "pod", "-n", APPS, name)
    return pod["status"].get("phase", ""), pod["spec"].get("nodeName", "")


def app_waits(name: str) -> bool:
    pod = kubectl_json("get", "pod", "-n", APPS, name)
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or []
    )


def assert_clean(name: str) -> None:
    """No stray taint, label, journal, slurmd pod or Slurm node on a node given back."""
    assert marks(name) == (False, False), f"{name}: label, taint {marks(name)}"
    assert journal(name)["state"] == "free", journal(name)
    assert not live_slurmd_pods(name), [p["metadata"]["name"] for p in live_slurmd_pods(name)]
    assert name not in slurm_nodes(), slurm_nodes()[name]


def given_back(name: str, notebook: str) -> None:
    """Clean, and the notebook that waited for the node runs there."""
    assert_clean(name)
    wait(lambda: app_phase(notebook) == ("Running", name), 60, f"{notebook} running on {name}")


def hold(seconds: int) -> str:
    return f"#!/bin/bash\nsleep {seconds}\n"


def lend(name: str, tmp: Path) -> None:
    run = playbook("lend", tmp, nodes=[name])
    assert run.rc == 0 and run.summary["outcome"] == "done", succeeded(run)
    idle(name)


def waiting_notebook(on: str, name: str = "notebook") -> None:
    """An application pod that waits for `on` (Unschedulable: the lent taint)."""
    app_pod(name, on=on)
    wait(lambda: app_waits(name), 30, f"{name} waiting for {on}")


def lent_with_a_waiting_notebook(name: str, tmp: Path) -> None:
    lend(name, tmp)
    waiting_notebook(name)


def idle(name: str) -> None:
    wait(lambda: slurmd_running(name), 120, f"slurmd running on {name}")
    found = wait(lambda: slurm_nodes().get(name), 60, f"Slurm node {name}")
    assert "IDLE" in found["state"] and not {"DRAIN", "DOWN"} & set(found["state"]), found["state"]


def release(job_id: int) -> None:
    """Let a requeued job start now (Slurm holds it back for a while; an operator's
    `scontrol update jobid=N begintime=now`)."""
    answer = slurmrestd(
        "POST", f"job/{job_id}", {"begin_time": {"set": True, "number": int(time.time())}}
    )
    assert not answer.get("errors"), answer["errors"]


def wait_running_on(job_id: int, name: str, timeout_s: float = 120) -> dict[str, Any]:
    record = wait_for_state(job_id, {"RUNNING"}, timeout_s)
    assert record["nodes"] == name, record["nodes"]
    return record


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workers() -> list[str]:
    found = kubectl_json("get", "nodes", "-l", f"{PREFIX}/pool=interactive")["items"]
    names = sorted(n["metadata"]["name"] for n in found)
    assert len(names) >= 2, f"the interactive pool has {names}; the scenario makes two"
    subprocess.run(
        ["kubectl", "create", "namespace", APPS], capture_output=True, text=True, check=False
    )
    return names[:2]


@pytest.fixture(autouse=True)
def free_pool(workers: list[str], tmp_path: Path) -> Iterator[None]:
    """Each test starts with the pool free, and its jobs and pods gone after it."""
    for name in workers:
        assert_clean(name)
    yield
    kubectl("delete", "pods", "-n", APPS, "--all", "--wait=true")
    for record in slurmrestd("GET", "jobs")["jobs"]:
        if not set(record["job_state"]) & ENDED:
            slurmrestd("DELETE", f"job/{record['job_id']}")
    lent = [name for name in workers if journal(name)["state"] != "free"]
    if lent:
        assert playbook("reclaim", tmp_path, nodes=lent).rc == 0


# -- the tests -----------------------------------------------------------------------------


def test_lend_reclaim_and_rebalance_on_real_kubelets(workers: list[str], tmp_path: Path) -> None:
    """The whole loan: lend, a job, reclaim at the deadline, the application, the requeue."""
    first, second = workers
    run = playbook("status", tmp_path)
    assert run.rc == 0, succeeded(run)
    assert {row["node"]: row["journal"] for row in run.status} == dict.fromkeys(workers, "free")
    # slurm-bridge's Token shows in status like the runs' own, renewed by the operator, its
    # JWT not yet due: whenever kind deploys the bridge (its release sources are here).
    if (REPO / ".kind/slurm-bridge-version").exists():
        (bridge_token,) = kubectl_json(
            "get", "tokens.slinky.slurm.net", "-n", NAMESPACE,
            "-l", "app.kubernetes.io/part-of=slurm-bridge",
        )["items"]  # fmt: skip
        name = bridge_token["metadata"]["name"]
        row = [line.split() for line in run.output.splitlines() if line.startswith(f"{name} ")]
        assert row and row[0][-1] == "ok", run.output[-3000:]
    lend(first, tmp_path)
    assert marks(first) == (True, True)
    run = playbook("status", tmp_path)
    assert {row["node"]: row["journal"] for row in run.status}[first] == "lent", run.status

    job_id = submit("hpcops-loan", hold(600), partition=PARTITION, requeue=True)
    wait_running_on(job_id, first)
    waiting_notebook(first, "notebook-1")

    run = playbook("reclaim", tmp_path, nodes=[first])
    assert run.rc == 0 and run.summary["returned"] == [first], succeeded(run)
    # The job ran until the partition's grace was over, then went back to the queue.
    assert run.seconds >= GRACE_S, f"reclaim took {run.seconds:.1f} s, grace {GRACE_S} s"
    # At the deadline the slurmd pod went within seconds, the job's processes with it: not
    # after its 30 s termination grace. Then the node went DOWN (the escalation, which
    # requeued the job) and back to the applications; its record went once slurmctld had
    # the job off it (drained), which takes longer under load and is not the application's
    # wait.
    steps = run.summary["reclaim_timelines"][first]
    print(
        f"reclaim of {first}: deadline (unlabel) to slurmd pod gone "
        f"{steps['pod_gone'] - steps['unlabel']:.1f} s, to free "
        f"{steps['free'] - steps['unlabel']:.1f} s, to Slurm's job off the node "
        f"{steps['drained'] - steps['unlabel']:.1f} s"
    )
    assert steps["pod_gone"] - steps["unlabel"] < 15, steps
    assert steps["unlabel"] < steps["pod_gone"] < steps["escalate"] < steps["free"], steps
    assert steps["free"] <= steps["drained"] <= steps["slurm_removed"], steps
    record = job(job_id)
    assert "PENDING" in record["job_state"] and record["restart_cnt"] >= 1, record["job_state"]
    given_back(first, "notebook-1")

    # The next scheduled run lends the idle worker, and the requeued job runs there.
    run = playbook("rebalance", tmp_path)
    assert run.rc == 0 and run.summary["lent"] == [second], succeeded(run)
    release(job_id)
    assert wait_running_on(job_id, second)["restart_cnt"] >= 1
    assert journal(first)["state"] == "free"  # it runs the notebook: never lent

    # Demand for the second worker: the next run gives it back (the job is requeued again).
    waiting_notebook(second, "notebook-2")
    run = playbook("rebalance", tmp_path)
    assert run.rc == 0 and run.summary["returned"] == [second], succeeded(run)
    given_back(second, "notebook-2")
    assert "PENDING" in job(job_id)["job_state"]

    # What the two loans gave Slurm, from the loans the runs recorded and slurmdbd's jobs:
    # the job's hours on the lent workers, and its attempts the reclaims requeued.
    textfile = tmp_path / "lending.prom"
    run = playbook("lending_report", tmp_path, handover_lending_report_textfile=str(textfile))
    assert run.rc == 0, succeeded(run)
    figures = prometheus_figures(textfile.read_text())
    print(f"lending report: {figures}")
    assert figures[("lent_node_hours", PARTITION, "*")] > 0, figures
    assert figures[("jobs_on_lent_nodes", PARTITION, "physics")] >= 1, figures
    assert figures[("used_node_hours", PARTITION, "physics")] > 0, figures
    assert figures[("requeued_by_reclaim", PARTITION, "physics")] >= 1, figures


def prometheus_figures(text: str) -> dict[tuple[str, str, str], float]:
    """(metric without its prefix, partition, account) -> value, from the report's text."""
    figures = {}
    for line in text.splitlines():
        match = re.match(
            r'hpcops_lending_(\w+)\{partition="([^"]*)",account="([^"]*)"\} (\S+)$', line
        )
        if match:
            figures[match.group(1), match.group(2), match.group(3)] = float(match.group(4))
    return figures


def stopped_and_resumed(
    tmp_path: Path, name: str, fault: str, stopped: Any, **options: Any
) -> tuple[Run, list[str]]:
    """A run stopped after a step, and the next run queued behind it on the Lease.

    The next run starts the moment the stopped one lets the Lease go, while the kubelet is
    still at work on what the stopped run began. `stopped` says, from the Node, that the run
    has taken the step. Returns the next run, and the states the node's slurmd pods went
    through from then on.
    """
    crashing = Started(name, tmp_path, fault=fault, **options)
    wait(stopped, 120, f"the run to take the step before {fault}")
    seen: list[str] = []
    resuming = Started(name, tmp_path, handover_lease_wait_s=120, **options)
    while resuming.process.poll() is None:
        pods = slurmd_pods(options["nodes"][0])
        state = ",".join(
            ("Terminating" if p["metadata"].get("deletionTimestamp") else p["status"]["phase"])
            for p in pods
        )
        if not seen or seen[-1] != state:
            seen.append(state)
        time.sleep(0.2)
    crashed, resumed = crashing.finish(), resuming.finish()
    print(f"slurmd pods while the runs went on: {seen}")
    assert_stopped(crashed)
    return resumed, seen


def test_a_lend_and_a_reclaim_stopped_while_slurmd_starts_and_stops_are_finished(
    workers: list[str], tmp_path: Path
) -> None:
    first, second = workers
    resumed, seen = stopped_and_resumed(
        tmp_path, "lend", "lend:label", lambda: marks(first) == (True, True), nodes=[first]
    )
    # The label was on before slurmd ran: the next run found the container starting.
    assert resumed.rc == 0 and resumed.summary["outcome"] == "done", succeeded(resumed)
    assert seen[0] in ("", "Pending"), seen
    assert journal(first)["state"] == "lent"
    idle(first)
    assert journal(second)["state"] == "free"

    waiting_notebook(first)
    resumed, seen = stopped_and_resumed(
        tmp_path, "reclaim", "reclaim:unlabel", lambda: marks(first) == (False, True), nodes=[first]
    )
    # The label went while slurmd still ran; the taint stayed until its pod was gone.
    assert resumed.rc == 0 and resumed.summary["returned"] == [first], succeeded(resumed)
    assert seen[0] in ("Running", "Terminating"), seen
    given_back(first, "notebook")


def test_a_reclaim_stopped_once_the_pod_is_gone_leaves_the_taint_until_resumed(
    workers: list[str], tmp_path: Path
) -> None:
    first = workers[0]
    lent_with_a_waiting_notebook(first, tmp_path)
    crashed = playbook("reclaim", tmp_path, nodes=[first], fault="reclaim:pod_gone")
    assert_stopped(crashed)
    # The step ends only when the kubelet has stopped every container and the sandbox (a
    # Terminating pod still holds the node): the taint is still on.
    assert not live_slurmd_pods(first), [p["metadata"] for p in live_slurmd_pods(first)]
    assert marks(first) == (False, True)
    # slurmd's preStop hook found the reclaim's drain and left the node to it
    # (slurm_cluster_prestop_leaves_reclaims): not marked DOWN, not deleted (Slinky 1.1's own
    # hook deletes it), as the reclaim's drain left it. The record waits for the reclaim's
    # later steps (free, slurm_removed), which the resumed run below must do.
    record = slurm_nodes().get(first)
    assert record is not None, f"{first}: no Slurm node; the hook must leave it to the reclaim"
    assert "DOWN" not in record["state"] and "DRAIN" in record["state"], record["state"]
    assert record["reason"].startswith("hpcops: reclaim "), record["reason"]
    assert app_phase("notebook")[0] == "Pending"
    run = playbook("rebalance", tmp_path)
    assert run.rc == 0, succeeded(run)
    given_back(first, "notebook")


def test_a_reclaim_stopped_while_the_drain_waits_on_a_job_lets_it_end(
    workers: list[str], tmp_path: Path
) -> None:
    first = workers[0]
    lend(first, tmp_path)
    # Long enough to outlast the notebook and the stopped run (20 s held ended before the
    # check once: 45 s of runs in kind), short of the partition's grace below.
    job_id = submit("hpcops-drain", hold(60), partition=PARTITION)
    wait_running_on(job_id, first)
    waiting_notebook(first)
    policy = {**POLICY, "partitions": {PARTITION: {"grace_s": 120, "escalation": "requeue"}}}
    crashed = playbook("reclaim", tmp_path, nodes=[first], fault="reclaim:drain", policy=policy)
    assert_stopped(crashed)
    slurm_node = slurm_nodes()[first]
    assert "DRAIN" in slurm_node["state"] and slurm_node["reason"].startswith("hpcops: reclaim")
    assert "RUNNING" in job(job_id)["job_state"]  # drained, not killed
    assert marks(first) == (True, True)
    # No node named: the run finishes what is in flight first.
    run = playbook("reclaim", tmp_path, policy=policy)
    assert run.rc == 0 and run.summary["returned"] == [first], succeeded(run)
    record = job(job_id)
    assert record["job_state"] == ["COMPLETED"] and record["restart_cnt"] == 0, record["job_state"]
    given_back(first, "notebook")
