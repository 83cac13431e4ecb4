# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm-bridge with external nodes, and a gang of two pods, on the lab.

site.yml deploys a bridge pool of kind `bridge` whose nodes are external (no slurmd: the
bridge registers the Kubernetes nodes in Slurm as `State=External`), on two kwok nodes of
their own. What runs for real: the apiserver, the Slinky operator and Slurm 26.05 (slurmctld
reading the NodeSet and partition lines the slurm_cluster role wrote), and the bridge's own
scheduler and controllers from the chart's Deployments (the pod runner runs them with the
chart's configuration, RBAC and the Token the operator signs). kwok stands in for the
kubelets: the bridge's external jobs need no slurmd, and where a pod runs is what is checked.
The admission webhook is off here (the lab has no kube-proxy to reach it), so the pods name
the bridge's scheduler themselves, and the role checks the scheduler but not the webhook;
kind runs the webhook (molecule/default).

Without slurm-bridge's sources (../shared/sources) the module is skipped.
"""

from __future__ import annotations

import copy
import os
import subprocess
import typing as t
from collections.abc import Iterator

import k8s_binaries
import pytest
import yaml
from ansible_runner import LAB_INVENTORY, SITE, run_playbook, run_task
from k8s_lab import K8sLab, LabNode
from slurm_pods import REST_ADDRESS, SlinkyRest
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures"]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not k8s_binaries.slurm_bridge_buildable(),
        reason="slurm-bridge's release source is not in ../shared/sources",
    ),
]

PARTITION = "slurm-bridge"
NAMESPACE = "slurm-bridge"  # the role's default managed namespace
SCHEDULER = "slurm-bridge-scheduler"
NODES = (
    LabNode("brg01", "bridge", cpus=4, memory_gib=8),
    LabNode("brg02", "bridge", cpus=4, memory_gib=8),
)
GROUP = "gang"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
JOB_ID_LABEL = "scheduler.slinky.slurm.net/slurm-jobid"
JOB_NAME = "hpcops-lab-gang"
NODENAME_LABEL = "slinky.slurm.net/slurm-nodename"
EXTERNAL_LABEL = "scheduler.slinky.slurm.net/external-node"
PODGROUPS = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/podgroups"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def lab_settings() -> dict[str, t.Any]:
    return yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "main.yml").read_text())


def bridge_vars() -> dict[str, t.Any]:
    """The lab's inventory with a bridge pool of external nodes and the bridge installed."""
    settings = lab_settings()
    components = list(settings["slinky_components"])
    components.insert(components.index("slurm_cluster") + 1, "slurm_bridge")
    pools = copy.deepcopy(settings["slurm_cluster_pools"])
    pools["bridge"] = {
        "kind": "bridge",
        "nodes": "external",
        "node_selector": {"hpcops.io/pool": "bridge"},
    }
    return {
        "slinky_components": components,
        "slurm_cluster_pools": pools,
        "slurm_bridge_chart": {"path": str(k8s_binaries.slurm_bridge_chart())},
        # Nothing in the lab can call a webhook through its Service (no kube-proxy); the
        # role's check of the scheduler (a pod made a Slurm job) runs all the same.
        "slurm_bridge_values": {"admission": {"enabled": False}},
        # Beside the lab's services: the bridge taints (NoExecute) the nodes it registers.
        "slurm_bridge_node_selector": settings["_lab_services"],
        "slurm_bridge_token_rollout": False,
    }


def slurm_nodes(rest: SlinkyRest) -> dict[str, dict[str, t.Any]]:
    return {node["name"]: node for node in rest.get("nodes")["nodes"]}


def remove_nodename_labels(lab: K8sLab) -> None:
    """The marks the role put on the lab's nodes (a Slurm name on the lendable ones)."""
    for node in lab.get("/api/v1/nodes")["items"]:
        labels = node["metadata"].get("labels") or {}
        if NODENAME_LABEL in labels or EXTERNAL_LABEL in labels:
            lab.request(
                "PATCH",
                f"/api/v1/nodes/{node['metadata']['name']}",
                {"metadata": {"labels": {NODENAME_LABEL: None, EXTERNAL_LABEL: None}}},
                content_type="application/merge-patch+json",
            )


@pytest.fixture(scope="module")
def bridge_site(k8s_lab: K8sLab) -> Iterator[SlinkyRest]:
    """site.yml with the bridge pool on two new kwok nodes; afterwards the bridge, its nodes
    (Kubernetes' and Slurm's) and the marks are gone, and the next module's site.yml run
    gives the lab back its own partitions."""
    k8s_binaries.ensure([f"slurm-bridge-{program}" for program in ("scheduler", "controllers")])
    for node in NODES:
        k8s_lab.apply("/api/v1/nodes", node.manifest())
    try:
        run = run_playbook(SITE, LAB_INVENTORY, extra_vars=bridge_vars())
        assert not run.failed, f"site.yml failed: {run.failures()}\n{run.output[-3000:]}"
        yield SlinkyRest.of_cluster(k8s_lab)
    finally:
        helm = k8s_binaries.ensure(["helm"])["helm"]
        subprocess.run(
            [str(helm), "uninstall", "slurm-bridge", "--namespace", "slurm", "--wait"],
            env={**os.environ, "KUBECONFIG": str(k8s_lab.kubeconfig_path)},
            check=False,
            capture_output=True,
            timeout=300,
        )
        for node in NODES:
            k8s_lab.request("DELETE", f"/api/v1/nodes/{node.name}")
        remove_nodename_labels(k8s_lab)
        rest = SlinkyRest.of_cluster(k8s_lab)
        for node in NODES:
            rest.request("DELETE", f"/slurm/{rest.api}/node/{node.name}")
        k8s_lab.request(
            "DELETE", "/apis/slinky.slurm.net/v1beta1/namespaces/slurm/tokens/slurm-bridge"
        )
        k8s_lab.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")


def test_external_nodes_register_in_the_bridge_partition(bridge_site: SlinkyRest) -> None:
    """The bridge's controllers put each node of the pool in Slurm as State=External, in the
    partition the role's NodeSet line gathers by feature."""
    seen: dict[str, t.Any] = {}

    def registered() -> bool:
        nodes = slurm_nodes(bridge_site)
        seen.update(
            {
                node.name: {
                    key: nodes[node.name].get(key) for key in ("state", "partitions", "features")
                }
                if node.name in nodes
                else "not in Slurm"
                for node in NODES
            }
        )
        return all(
            node.name in nodes
            and "EXTERNAL" in nodes[node.name]["state"]
            and PARTITION in nodes[node.name]["partitions"]
            for node in NODES
        )

    wait_until(registered, 120.0, f"both bridge nodes External in {PARTITION}", lambda: seen)
    partition = bridge_site.get(f"partition/{PARTITION}")["partitions"][0]
    assert partition["nodes"]["total"] == len(NODES), partition["nodes"]


def test_a_gang_of_two_is_one_slurm_job_on_two_nodes_and_ends_with_it(
    bridge_site: SlinkyRest, k8s_lab: K8sLab
) -> None:
    """A PodGroup with minMember 2: one Slurm job on both nodes, each pod bound to one of
    them; cancelling that job (slurm_job) deletes both pods."""
    crd = yaml.safe_load(k8s_binaries.slurm_bridge_podgroup_crd().read_text())
    k8s_lab.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    wait_until(
        lambda: k8s_lab.request("GET", PODGROUPS)[0] == 200, 60.0, "the PodGroup API to be served"
    )
    k8s_lab.apply(
        PODGROUPS,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {
                "name": GROUP,
                "annotations": {"slurmjob.slinky.slurm.net/job-name": JOB_NAME},
            },
            "spec": {"minMember": 2},
        },
    )
    names = [f"{GROUP}-{index}" for index in range(2)]
    for name in names:
        k8s_lab.apply(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {GROUP_LABEL: GROUP}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.lab.invalid/app:1"}],
                },
            },
        )
    pods: dict[str, dict[str, t.Any]] = {}

    def bound() -> bool:
        for name in names:
            pods[name] = k8s_lab.get(f"{PODS}/{name}")
        return all(
            pod["spec"].get("nodeName") and JOB_ID_LABEL in pod["metadata"].get("labels", {})
            for pod in pods.values()
        )

    def saw() -> str:
        return str(
            {
                name: (
                    pod["spec"].get("nodeName"),
                    pod["metadata"].get("labels", {}).get(JOB_ID_LABEL),
                )
                for name, pod in pods.items()
            }
        )

    try:
        wait_until(bound, 120.0, "both pods bound, with a Slurm job", saw)
        job_ids = {pod["metadata"]["labels"][JOB_ID_LABEL] for pod in pods.values()}
        assert len(job_ids) == 1, f"one Slurm job for the group, saw {saw()}"
        assert sorted(pod["spec"]["nodeName"] for pod in pods.values()) == [n.name for n in NODES]
        job_id = int(job_ids.pop())
        job = bridge_site.get(f"job/{job_id}")["jobs"][0]
        assert job["name"] == JOB_NAME and job["partition"] == PARTITION, job
        assert job["job_state"] == ["RUNNING"] and job["node_count"]["number"] == 2, job

        cancelled = run_task(
            "hpcops.slinky.slurm_job",
            {
                "url": f"http://{REST_ADDRESS}",
                "token": bridge_site.token(),
                "job_ids": [job_id],
                "action": "cancel",
            },
        )
        assert not cancelled.failed and cancelled["changed"], cancelled.output[-2000:]

        def deleted() -> bool:
            return all(k8s_lab.request("GET", f"{PODS}/{name}")[0] == 404 for name in names)

        wait_until(deleted, 120.0, "the bridge to delete both pods of the cancelled job")
    finally:
        for name in names:
            k8s_lab.request("DELETE", f"{PODS}/{name}", {"gracePeriodSeconds": 0})
        k8s_lab.request("DELETE", f"{PODGROUPS}/{GROUP}")
