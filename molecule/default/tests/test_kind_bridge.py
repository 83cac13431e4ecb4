# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm-bridge when its node goes away: the Node deleted while a bridge job runs there and
slurmctld restarted meanwhile.

The pod garbage collector deletes the pods of a deleted Node, the bridge cancels the Slurm
job of its pod, and slurmctld, restarted from its saved state, keeps every other job: a
batch job running on another node runs on with its job id and no requeue. Once the kubelet
registers its Node again (an admin restarts it, as kubelets do not re-register by
themselves), slurmd's DaemonSet pod returns, the node is IDLE in Slurm and the bridge runs
pods there again. The checks of verify_bridge.yml run after these, on the node that came back.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest
import testinfra
from kind_cluster import (
    ENDED,
    NAMESPACE,
    configured,
    job,
    kubectl,
    kubectl_json,
    slurmrestd,
    submit,
    wait,
    wait_for_state,
)

# The bridge kind deployed: its managed namespace (empty without the bridge), its partition,
# and an image for the pods.
BRIDGE = {
    key: os.environ.get(f"HPCOPS_KIND_BRIDGE_{key.upper()}", "")
    for key in ("namespace", "partition", "image")
}
BATCH_PARTITION = "batch"
JOB_ID_LABEL = "scheduler.slinky.slurm.net/slurm-jobid"

pytestmark = [
    pytest.mark.skipif(
        not configured(), reason="run by molecule verify (molecule/shared/verify_kind.yml)"
    ),
    pytest.mark.skipif(
        not BRIDGE["namespace"], reason="kind deploys no slurm-bridge (no release sources)"
    ),
]


def bridge_pod(name: str) -> dict[str, Any]:
    """A pod of the bridge's namespace that sleeps; the bridge makes it a whole-node job."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": BRIDGE["namespace"],
            "annotations": {"slurmjob.slinky.slurm.net/job-name": f"hpcops-{name}"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,  # sh as PID 1 ignores SIGTERM
            "containers": [
                {
                    "name": "main",
                    "image": BRIDGE["image"],
                    "command": ["sh", "-c", "sleep 600"],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": "1", "memory": "64Mi"},
                    },
                }
            ],
        },
    }


def pod(name: str) -> dict[str, Any] | None:
    found = kubectl_json("get", "pods", "-n", BRIDGE["namespace"], "--field-selector",
                         f"metadata.name={name}")["items"]  # fmt: skip
    return found[0] if found else None


def running_pod(name: str, timeout_s: float) -> dict[str, Any]:
    def runs() -> dict[str, Any] | None:
        found = pod(name)
        return found if found and found["status"].get("phase") == "Running" else None

    return wait(runs, timeout_s, f"bridge pod {name} Running (now: {pod(name)})")


def node_ready(name: str) -> bool:
    nodes = kubectl_json("get", "nodes")["items"]
    return any(
        node["metadata"]["name"] == name
        and any(
            c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
        )
        for node in nodes
    )


def slurmctld_ready() -> bool:
    pods = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=slurmctld")
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for item in pods["items"]
        if not item["metadata"].get("deletionTimestamp")
        for c in item["status"].get("conditions") or []
    )


def slurm_node_state(name: str) -> list[str] | None:
    """Slurm's state of the node; None while slurmrestd cannot say (slurmctld restarting)."""
    answer = slurmrestd("GET", f"node/{name}")
    nodes = answer.get("nodes") or []
    return list(nodes[0]["state"]) if nodes and not answer.get("errors") else None


def node_idle(state: list[str] | None) -> bool:
    """IDLE and nothing that keeps jobs off it (a DaemonSet's slurmd is DYNAMIC_NORM)."""
    return (
        bool(state) and state[0] == "IDLE" and not {"DRAIN", "DOWN", "NOT_RESPONDING"} & set(state)
    )


def job_state(job_id: int) -> str:
    """slurmctld's state of the job, or slurmdbd's once slurmctld has let it go."""
    jobs = slurmrestd("GET", f"job/{job_id}").get("jobs") or []
    if jobs:
        return str(jobs[0]["job_state"][0])
    records = slurmrestd("GET", f"job/{job_id}", plugin="slurmdb").get("jobs") or []
    return str(records[0]["state"]["current"][0]) if records else "unknown"


def test_a_bridge_node_deleted_and_slurmctld_restarted_lose_no_other_job() -> None:
    unrelated = submit(
        "hpcops-beside-the-bridge", "#!/bin/sh\nsleep 900\n", partition=BATCH_PARTITION
    )
    name = "bridge-node-gone"
    node = ""
    try:
        before = wait_for_state(unrelated, {"RUNNING"}, 120)
        kubectl("apply", "-f", "-", input_text=json.dumps(bridge_pod(name)))
        placed = running_pod(name, 180)
        node = placed["spec"]["nodeName"]
        bridge_job = int(placed["metadata"]["labels"][JOB_ID_LABEL])
        record = job(bridge_job)
        assert (record["job_state"], record["partition"]) == (["RUNNING"], BRIDGE["partition"])
        assert before["nodes"] != node, "the batch job runs on the bridge's node"

        started = time.monotonic()
        kubectl("delete", "node", node)
        kubectl("delete", "pod", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=slurmctld")
        wait(slurmctld_ready, 300, "slurmctld Ready again after its restart")
        # The pod garbage collector deletes a deleted Node's pods (after 40 s of quarantine);
        # the bridge then cancels the pod's Slurm job.
        wait(lambda: pod(name) is None, 180, f"pod {name} of deleted node {node} gone")
        wait(lambda: job_state(bridge_job) in ENDED, 120,
             f"the bridge ending job {bridge_job} of its deleted pod (now {job_state(bridge_job)})")  # fmt: skip
        node_host = testinfra.get_host(f"docker://{node}")
        node_host.run_test("systemctl restart kubelet")
        wait(lambda: node_ready(node), 180, f"Node {node} registered again and Ready")
        wait(lambda: node_idle(slurm_node_state(node)), 300,
             f"Slurm node {node} IDLE again (now {slurm_node_state(node)})")  # fmt: skip
        print(f"\nNode {node} deleted, slurmctld restarted: back in Slurm after "
              f"{time.monotonic() - started:.0f} s")  # fmt: skip

        after = job(unrelated)
        assert after["job_state"] == ["RUNNING"], after["job_state"]
        assert (after["nodes"], after["restart_cnt"]) == (before["nodes"], 0), after

        kubectl("apply", "-f", "-", input_text=json.dumps(bridge_pod(f"{name}-again")))
        again = running_pod(f"{name}-again", 180)
        assert again["spec"]["nodeName"] == node, again["spec"]
    finally:
        # A failure half way must not leave the later checks a cluster without the node.
        if node and not node_ready(node):
            testinfra.get_host(f"docker://{node}").run("systemctl restart kubelet")
        subprocess.run(
            ["kubectl", "delete", "pod", "-n", BRIDGE["namespace"], "--ignore-not-found",
             "--wait=false", name, f"{name}-again"],
            check=False, capture_output=True,
        )  # fmt: skip
        slurmrestd("DELETE", f"job/{unrelated}")
