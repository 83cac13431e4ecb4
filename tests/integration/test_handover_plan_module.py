# SPDX-License-Identifier: GPL-3.0-or-later
"""handover_plan against the lab: the real apiserver and scheduler, the deployed Slurm.

The lab's services (operator, slurmctld, slurmrestd, cert-manager) run on svc01, so the
interactive pool (int01, int02, gpu01, gpu02) holds only what these tests put there.
"""

from __future__ import annotations

import json
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import run_task
from k8s_lab import K8sLab
from slurm_pods import REST_ADDRESS, SlinkyRest
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

POOL = {"hpcops.io/pool": "interactive"}
JOURNAL = "hpcops.io/handover"
APP_NAMESPACE = "jupyterhub"
MERGE = "application/merge-patch+json"


@pytest.fixture
def plan(
    slinky_site: K8sLab, slinky_slurm: SlinkyRest, secret_dir: Path
) -> t.Callable[..., dict[str, t.Any]]:
    key = secret_dir / "jwt.key"
    key.write_bytes(slinky_slurm.jwt_key)
    key.chmod(0o600)

    def run(**policy: t.Any) -> dict[str, t.Any]:
        result = run_task(
            "hpcops.slinky.handover_plan",
            {
                "url": f"http://{REST_ADDRESS}",
                "jwt_key_path": str(key),
                "kubeconfig": str(slinky_site.kubeconfig_path),
                "policy": {"pool_selector": POOL, "lend_min_idle_s": 0, **policy},
            },
        )
        assert not result.failed, result
        assert slinky_slurm.token() not in result.output
        return result

    return run


def decided(result: dict[str, t.Any], key: str) -> list[str]:
    return [d["node"] for d in result[key]]


@pytest.fixture
def app_namespace(slinky_site: K8sLab) -> Iterator[str]:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NAMESPACE}}
    slinky_site.apply("/api/v1/namespaces", body)
    yield APP_NAMESPACE
    for pod in slinky_site.get(f"/api/v1/namespaces/{APP_NAMESPACE}/pods")["items"]:
        name = pod["metadata"]["name"]
        slinky_site.request(
            "DELETE", f"/api/v1/namespaces/{APP_NAMESPACE}/pods/{name}?gracePeriodSeconds=0"
        )


def pod(name: str, node_selector: dict[str, str]) -> dict[str, t.Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APP_NAMESPACE},
        "spec": {
            "nodeSelector": node_selector,
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook:latest",
                    "resources": {"requests": {"cpu": "16", "memory": "64Gi"}},
                }
            ],
        },
    }


def test_idle_pool_nodes_are_lent_beyond_headroom(plan: t.Callable[..., dict[str, t.Any]]) -> None:
    result = plan(headroom=1, never_touch_selector={"kubernetes.io/hostname": "int02"})
    # Three idle nodes in the pool (int02 is never-touch); one stays free as headroom.
    assert decided(result, "lend") == ["gpu01", "gpu02"]
    reasons = {d["node"]: d["reason"] for d in result["left_alone"]}
    assert reasons["int02"] == "never-touch"
    assert reasons["int01"].startswith("kept free")
    for node in ("svc01", "hpc01", "hpc02", "burst01", "burst02"):
        assert reasons[node] == "not in the lendable pool"


def test_a_busy_node_is_not_lent_and_pending_pods_are_demand(
    slinky_site: K8sLab, app_namespace: str, plan: t.Callable[..., dict[str, t.Any]]
) -> None:
    # One notebook runs on int01 (the real scheduler binds it); one cannot be placed.
    slinky_site.apply(
        f"/api/v1/namespaces/{app_namespace}/pods",
        pod("running", {"kubernetes.io/hostname": "int01"}),
    )
    slinky_site.apply(
        f"/api/v1/namespaces/{app_namespace}/pods", pod("waiting", {"hpcops.io/gpu-model": "none"})
    )

    def scheduled() -> bool:
        pods = {
            p["metadata"]["name"]: p
            for p in slinky_site.get(f"/api/v1/namespaces/{app_namespace}/pods")["items"]
        }
        waiting = pods["waiting"]["status"].get("conditions", [])
        return pods["running"]["spec"].get("nodeName") == "int01" and any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in waiting
        )

    wait_until(scheduled, 30, "the scheduler to bind one pod and give up on the other")
    result = plan(headroom=1)
    assert result["demand_nodes"] == 1
    # Three idle nodes; one for the waiting pod, one headroom: one to lend.
    assert result["free_idle"] == 3
    assert decided(result, "lend") == ["gpu01"]
    reasons = {d["node"]: d["reason"] for d in result["left_alone"]}
    assert reasons["int01"] == "runs 1 application pod(s)"


def test_journals_the_nodes_contradict_are_mended_and_in_flight_ones_resumed(
    slinky_site: K8sLab, app_namespace: str, plan: t.Callable[..., dict[str, t.Any]]
) -> None:
    """Journals that say lent on Nodes without the lend label or the taint (no run wrote
    them so) are not planned by demand: each is named with its condition and given back;
    the reclaim under way is resumed. Demand's ranking of truly lent nodes is shown where
    nodes are lent for real (test_handover.py, the unit tests of the planner)."""
    journals = {
        "gpu01": {"state": "lent", "op": "t1", "since": 1},
        "gpu02": {"state": "lent", "op": "t2", "since": 1},
        "int01": {"state": "lent", "op": "t3", "since": 1},
        "int02": {"state": "reclaiming", "op": "t4", "since": 1},
    }
    try:
        for node, journal in journals.items():
            annotate(slinky_site, node, json.dumps(journal))
        slinky_site.apply(
            f"/api/v1/namespaces/{app_namespace}/pods",
            pod("waiting", {"hpcops.io/gpu-model": "none"}),
        )
        wait_until(
            lambda: plan(headroom=0)["demand_nodes"] == 1, 30, "the pending pod to count as demand"
        )
        result = plan(headroom=0)
        assert decided(result, "resume") == ["int02"]
        mended = {m["node"]: (m["condition"], m["action"]) for m in result["reconcile"]}
        assert mended == {
            name: ("journal_lent_no_label", "reclaim") for name in ("gpu01", "gpu02", "int01")
        }, result["reconcile"]
        assert not result["lend"] and not result["reclaim"]
    finally:
        for node in journals:
            annotate(slinky_site, node, None)


def annotate(lab: K8sLab, node: str, journal: str | None) -> None:
    status, body = lab.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"annotations": {JOURNAL: journal}}},
        content_type=MERGE,
    )
    assert status == 200, body
