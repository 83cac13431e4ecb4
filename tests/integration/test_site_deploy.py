# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml against the lab: the real apiserver, scheduler and Slinky operator.

The Slinky charts come from the pinned slurm-operator module (packaged by the lab); the
apiserver validates every custom resource against the CRDs' schemas; the operator, run by
the lab's pod runner from its chart's Deployment, reconciles them.
"""

from __future__ import annotations

import base64
import typing as t
import urllib.request

import pytest
from ansible_runner import REPO, run_playbook
from pod_runner import OPERATOR_HEALTH_ADDR

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

SITE = REPO / "playbooks" / "site.yml"
LAB_INVENTORY = REPO / "inventories" / "lab"
NAMESPACE = "slurm"


def helm_releases(lab: t.Any) -> dict[str, str]:
    """Helm release secrets (name -> resourceVersion) in every namespace."""
    body = lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")
    return {
        f"{s['metadata']['namespace']}/{s['metadata']['name']}": s["metadata"]["resourceVersion"]
        for s in body["items"]
    }


def custom_resources(lab: t.Any, plural: str) -> dict[str, dict[str, t.Any]]:
    body = lab.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NAMESPACE}/{plural}")
    return {item["metadata"]["name"]: item for item in body["items"]}


@pytest.fixture(scope="module")
def deployed(k8s_lab: t.Any) -> t.Any:
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, f"site.yml failed: {run.failures()}\n{run.output[-3000:]}"
    return k8s_lab


def test_operator_runs_from_its_chart(deployed: t.Any) -> None:
    pods = deployed.get("/api/v1/namespaces/slinky/pods")["items"]
    operator = [p for p in pods if p["metadata"]["name"].startswith("slurm-operator-")]
    assert len(operator) == 1
    # kwok reports every pod Running; the real process answers on its health port.
    with urllib.request.urlopen(f"http://{OPERATOR_HEALTH_ADDR}/readyz", timeout=5) as resp:
        assert resp.status == 200
    # No webhook in the lab: the apiserver cannot call into a kwok pod.
    assert not [p for p in pods if "webhook" in p["metadata"]["name"]]


def test_crds_are_established(deployed: t.Any) -> None:
    body = deployed.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    slinky = {
        crd["metadata"]["name"]: {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        for crd in body["items"]
        if crd["spec"]["group"] == "slinky.slurm.net"
    }
    assert set(slinky) == {
        f"{plural}.slinky.slurm.net"
        for plural in ("accountings", "controllers", "loginsets", "nodesets", "restapis", "tokens")
    }
    assert all(conditions.get("Established") == "True" for conditions in slinky.values())


def test_nodesets_follow_the_pools(deployed: t.Any) -> None:
    nodesets = custom_resources(deployed, "nodesets")
    assert set(nodesets) == {
        "slurm-worker-hpc",
        "slurm-worker-interactive",
        "slurm-worker-interactive-a100",
    }
    hpc = nodesets["slurm-worker-hpc"]["spec"]
    assert hpc["scalingMode"] == "StatefulSet"
    assert hpc["replicas"] == 2  # one per node of the pool
    assert hpc["template"]["spec"]["nodeSelector"]["hpcops.io/pool"] == "slurm"

    for name in ("slurm-worker-interactive", "slurm-worker-interactive-a100"):
        spec = nodesets[name]["spec"]
        assert spec["scalingMode"] == "DaemonSet"
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"]["hpcops.io/slurm-lent"] == "true"
        assert {"key": "hpcops.io/lent", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
    gpu = nodesets["slurm-worker-interactive-a100"]["spec"]
    assert gpu["extraConf"] == "Gres=gpu:a100:4"
    assert gpu["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == (
        "NVIDIA-A100-SXM4-80GB"
    )
    plain = nodesets["slurm-worker-interactive"]["spec"]["template"]["spec"]
    terms = plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] == "NotIn"


def test_operator_wrote_slurm_conf(deployed: t.Any) -> None:
    config = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-config")["data"]
    lines = set(config["slurm.conf"].splitlines())
    assert {
        "ClusterName=lab",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "MCSPlugin=mcs/label",
        "MCSParameters=enforced,select",
        "NodeSet=hpc Feature=hpc",
        "PartitionName=batch Nodes=hpc Default=YES MaxTime=UNLIMITED State=UP",
        "PartitionName=backfill Nodes=interactive,interactive-a100 GraceTime=30 "
        "MaxTime=4:00:00 PreemptMode=REQUEUE PriorityTier=1 State=UP",
    } <= lines
    extra = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-config-extra")["data"]
    assert extra["cgroup.conf"].splitlines() == [
        "CgroupPlugin=autodetect",
        "ConstrainCores=yes",
        "ConstrainRAMSpace=yes",
        "ConstrainDevices=yes",
        "ConstrainSwapSpace=yes",
        "AllowedSwapSpace=0",
    ]
    # The operator built the controller from the Controller resource.
    statefulset = deployed.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/slurm-controller"
    )
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["name"] == "slurmctld"


def test_jwt_key_is_generated_once_and_kept(deployed: t.Any) -> None:
    secret = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/slurm-jwt-key")
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, run.failures()
    again = deployed.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/slurm-jwt-key")
    assert again["data"] == secret["data"]
    key = secret["data"]["jwt_hs256.key"]
    assert len(base64.b64decode(key)) == 64
    assert key not in run.output
    assert base64.b64decode(key).decode() not in run.output


def test_second_run_changes_nothing(deployed: t.Any) -> None:
    run = run_playbook(SITE, LAB_INVENTORY)
    assert not run.failed, run.failures()
    assert run.changed == 0, f"changed on a second run: {run.changed_tasks()}"


def test_check_mode_on_a_deployed_site_changes_nothing(deployed: t.Any) -> None:
    before = helm_releases(deployed)
    nodesets = {
        n: o["metadata"]["resourceVersion"]
        for n, o in custom_resources(deployed, "nodesets").items()
    }
    run = run_playbook(SITE, LAB_INVENTORY, check=True, diff=True)
    assert not run.failed, run.failures()
    assert run.changed == 0, f"check mode reports changes: {run.changed_tasks()}"
    assert helm_releases(deployed) == before
    assert {
        n: o["metadata"]["resourceVersion"]
        for n, o in custom_resources(deployed, "nodesets").items()
    } == nodesets
