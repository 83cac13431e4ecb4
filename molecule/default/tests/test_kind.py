# SPDX-License-Identifier: GPL-3.0-or-later
"""Host, pod and job state of the kind scenario; molecule's verify runs this with pytest.

The nodes are kind's containers (testinfra's docker backend), the Slurm daemons run in the
pods Slinky's operator made (testinfra's kubectl backend), and the jobs go through
slurmrestd with a token the operator minted (a Slinky Token made by verify_kind.yml).
What the jobs report about their own cgroups is the answer to the seeds' question whether
Slurm's cgroup plugins work inside a slurmd pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import testinfra
from kind_cluster import (
    NAMESPACE,
    PREFLIGHT_REPORT,
    configured,
    kubectl_json,
    submit,
    wait_for_state,
)

SLURM_POOL = "slurm"
PARTITION = "batch"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(
    not configured(), reason="run by molecule verify (molecule/shared/verify_kind.yml)"
)


def slurmd_pods() -> list[dict[str, Any]]:
    pods = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=slurmd")[
        "items"
    ]
    nodes = {n["metadata"]["name"]: n for n in kubectl_json("get", "nodes")["items"]}
    return [
        pod
        for pod in pods
        if nodes[pod["spec"]["nodeName"]]["metadata"]["labels"].get("hpcops.io/pool") == SLURM_POOL
    ]


@pytest.fixture(scope="module")
def slurmd_pod() -> dict[str, Any]:
    pods = slurmd_pods()
    assert pods, f"no slurmd pod on a node of pool {SLURM_POOL}"
    return pods[0]


def pod_host(pod: dict[str, Any]) -> Any:
    return testinfra.get_host(
        f"kubectl://{pod['metadata']['name']}?container=slurmd&namespace={NAMESPACE}"
    )


def node_host(pod: dict[str, Any]) -> Any:
    return testinfra.get_host(f"docker://{pod['spec']['nodeName']}")


def test_slurmd_runs_as_a_container_on_the_slurm_worker(slurmd_pod: dict[str, Any]) -> None:
    node = node_host(slurmd_pod)
    running = node.check_output("crictl ps --state running --name '^slurmd$' --quiet")
    assert running.strip(), f"no running slurmd container on {slurmd_pod['spec']['nodeName']}"
    assert node.service("kubelet").is_running


def test_slurmd_sees_a_writable_cgroup_hierarchy(slurmd_pod: dict[str, Any]) -> None:
    pod = pod_host(slurmd_pod)
    kind = pod.check_output("stat -fc %T /sys/fs/cgroup")
    if kind == "tmpfs":  # cgroup v1: one mount per controller
        for controller in ("memory", "cpuset", "freezer", "devices"):
            options = pod.check_output(f"findmnt -n -o OPTIONS /sys/fs/cgroup/{controller}")
            assert options.split(",")[0] == "rw", f"/sys/fs/cgroup/{controller} is {options}"
    else:
        assert kind == "cgroup2fs", f"/sys/fs/cgroup is {kind}"
        assert pod.check_output("findmnt -n -o OPTIONS /sys/fs/cgroup").split(",")[0] == "rw"


LIMITS_SCRIPT = """#!/bin/bash
# Report this job's own cgroup limits, then stay long enough to be found from the node.
v1() { cat /sys/fs/cgroup/$1/slurm*/uid_*/job_${SLURM_JOB_ID}/$2; }
if [ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ]; then
  echo "memory=$(v1 memory memory.limit_in_bytes)"
  echo "memsw=$(v1 memory memory.memsw.limit_in_bytes)"
  echo "cpus=$(v1 cpuset cpuset.cpus)"
else
  job=$(sed -n 's/^0:://p' /proc/self/cgroup | sed 's,/step_.*,,')
  echo "memory=$(cat /sys/fs/cgroup$job/memory.max)"
  echo "memsw=$(( $(cat /sys/fs/cgroup$job/memory.max) + $(cat /sys/fs/cgroup$job/memory.swap.max) ))"
  echo "cpus=$(cat /sys/fs/cgroup$job/cpuset.cpus.effective)"
fi
echo "cgroup=$(grep -m1 -E 'memory|^0::' /proc/self/cgroup)"
sleep 20
"""


def test_a_job_runs_under_the_limits_cgroup_conf_asks_for(slurmd_pod: dict[str, Any]) -> None:
    job_id = submit("hpcops-limits", LIMITS_SCRIPT, partition=PARTITION, memory_mib=100)
    record = wait_for_state(job_id, {"RUNNING", "COMPLETED", "FAILED"})
    assert "RUNNING" in record["job_state"], record["job_state"]
    pods = {pod["spec"]["hostname"]: pod for pod in slurmd_pods()}
    pod = pods[record["nodes"]]
    # From the node, the job's cgroup sits inside the slurmd container's, under the kubelet's.
    found = node_host(pod).check_output(f"find /sys/fs/cgroup/memory -type d -name job_{job_id}")
    assert "kubelet" in found and f"job_{job_id}" in found, found
    record = wait_for_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY"})
    assert "COMPLETED" in record["job_state"], record["job_state"]
    output = pod_host(pod).check_output(f"cat /tmp/hpcops-{job_id}.out")
    report = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    print(f"job {job_id} on {record['nodes']}: {report}; node cgroup {found}")
    assert int(report["memory"]) == 100 * MIB, report
    assert int(report["memsw"]) == 100 * MIB, report  # ConstrainSwapSpace, AllowedSwapSpace=0
    assert report["cpus"].isdigit(), f"one CPU asked for, cpuset {report['cpus']}"


def test_a_job_over_its_memory_is_killed_by_the_kernel() -> None:
    script = '#!/bin/bash\ngawk \'BEGIN { x = sprintf("%300000000s", ""); print length(x) }\'\n'
    job_id = submit("hpcops-oom", script, partition=PARTITION, memory_mib=100)
    record = wait_for_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY"})
    assert "OUT_OF_MEMORY" in record["job_state"], record["job_state"]


# The node containers as the kind inventory lists them, by pool.
NODE_HOSTS = {
    "hpcops-worker": "hpc",
    "hpcops-worker2": "interactive",
    "hpcops-worker3": "interactive",
    "hpcops-worker4": "bridge",
}


def test_the_preflight_passed_on_every_node_host() -> None:
    results = json.loads(Path(PREFLIGHT_REPORT).read_text())["results"]
    assert {r["host"] for r in results} - {"(site)"} == set(NODE_HOSTS)
    assert [r for r in results if r["status"] == "fail"] == []
    checks = {(r["host"], r["check"]): r["status"] for r in results}
    for host in NODE_HOSTS:
        assert checks[(host, "node.labels")] == "pass"
        assert checks[(host, "kubelet.cgroup_driver")] == "pass"
        assert checks[(host, "sysctl.fs.inotify.max_user_instances")] == "pass"


@pytest.mark.parametrize("name", list(NODE_HOSTS))
def test_node_prep_left_the_node_host_ready(name: str) -> None:
    node = testinfra.get_host(f"docker://{name}")
    settings = node.file("/etc/sysctl.d/90-hpcops-slinky.conf")
    assert settings.contains("^fs.inotify.max_user_instances=")
    assert settings.contains("^net.ipv4.ip_forward=1$")
    assert node.sysctl("fs.inotify.max_user_instances") >= 8192
    assert node.service("kubelet").is_running
    assert node.service("containerd").is_running
