# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes lab itself: a real control plane with RBAC, kwok nodes shaped like a site."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_binaries import KUBERNETES_VERSION, binary
from k8s_lab import GPU_PRODUCT, NODES, POOL_LABEL, K8sLab
from toolbox import wait_until

pytestmark = pytest.mark.integration
# The k8s_lab session fixture.
pytest_plugins = ["k8s_fixtures"]


@pytest.fixture
def namespace(k8s_lab: K8sLab) -> Iterator[str]:
    """A namespace of its own per test, deleted afterwards (the controllers empty it)."""
    name = f"hpcops-lab-test-{secrets.token_hex(3)}"
    k8s_lab.apply("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    k8s_lab.request("DELETE", f"/api/v1/namespaces/{name}")


def test_version_is_the_pinned_kubernetes(k8s_lab: K8sLab) -> None:
    version = k8s_lab.get("/version")
    assert version["gitVersion"] == KUBERNETES_VERSION
    assert (version["major"], version["minor"]) == tuple(KUBERNETES_VERSION[1:].split(".")[:2])


def test_kubectl_lists_the_lab_nodes(k8s_lab: K8sLab) -> None:
    kubectl = str(binary("kubectl").path)
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(k8s_lab.kubeconfig_path), "get", "nodes", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(f"node/{name}" for name in k8s_lab.node_names)


def service_account_token(lab: K8sLab, namespace: str, name: str) -> str:
    """A TokenRequest token of a new service account that no role is bound to."""
    lab.apply(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    status, body = lab.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, body
    return str(body["status"]["token"])


def test_rbac_denies_an_unprivileged_token_and_allows_the_admin(
    k8s_lab: K8sLab,
    namespace: str,
) -> None:
    nobody = service_account_token(k8s_lab, namespace, "nobody")

    status, body = k8s_lab.request("GET", "/api/v1/nodes", token=nobody)
    assert status == 403, body
    assert f"system:serviceaccount:{namespace}:nobody" in body["message"]

    status, _body = k8s_lab.request("GET", "/api/v1/nodes", token="not-a-token")
    assert status == 401
    status, _body = k8s_lab.request("GET", "/api/v1/nodes")
    assert status == 200


def test_kwok_nodes_are_ready_and_labelled_by_pool(k8s_lab: K8sLab) -> None:
    pools = {node.name: node.pool for node in NODES}

    def nodes_ready() -> dict[str, Any]:
        # kwok's heartbeats can lag a loaded machine: a Node may show Unknown for a moment.
        nodes = {n["metadata"]["name"]: n for n in k8s_lab.get("/api/v1/nodes")["items"]}
        ready = {
            name: {c["type"]: c["status"] for c in n["status"]["conditions"]}.get("Ready")
            for name, n in nodes.items()
        }
        return nodes if set(ready.values()) == {"True"} else {}

    nodes = wait_until(nodes_ready, 60, "every kwok node Ready")
    assert sorted(nodes) == sorted(pools)
    for name, node in nodes.items():
        assert node["metadata"]["labels"][POOL_LABEL] == pools[name]
    assert sorted(pools.values()).count("interactive") == 4
    assert sorted(pools.values()).count("slurm") == 2
    assert sorted(pools.values()).count("never-touch") == 1


def test_gpu_nodes_publish_gpus_and_feature_labels(k8s_lab: K8sLab) -> None:
    gpu_nodes = [node for node in NODES if node.gpus]
    assert len(gpu_nodes) == 2
    for lab_node in gpu_nodes:
        node = k8s_lab.get(f"/api/v1/nodes/{lab_node.name}")
        labels = node["metadata"]["labels"]
        assert labels[POOL_LABEL] == "interactive"
        assert labels["nvidia.com/gpu.product"] == GPU_PRODUCT
        assert labels["nvidia.com/gpu.count"] == "4"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def deployment(name: str, pool: str) -> dict[str, Any]:
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "nodeSelector": {POOL_LABEL: pool},
                    # kwok runs no container: the image is never pulled.
                    "containers": [{"name": "main", "image": "registry.invalid/lab/pause:1"}],
                },
            },
        },
    }


def test_deployment_pod_is_scheduled_onto_a_kwok_node_and_running(
    k8s_lab: K8sLab,
    namespace: str,
) -> None:
    k8s_lab.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("web", "slurm"))

    def running_pod() -> dict[str, Any] | None:
        pods = k8s_lab.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3Dweb")["items"]
        return next((p for p in pods if p["status"].get("phase") == "Running"), None)

    pod = wait_until(running_pod, 60.0, "a Running pod of the deployment")
    assert pod["spec"]["nodeName"] in {node.name for node in NODES if node.pool == "slurm"}
    scheduled = {c["type"]: c["status"] for c in pod["status"]["conditions"]}["PodScheduled"]
    assert scheduled == "True"
    # The controller-manager made the ReplicaSet that owns the pod.
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet"
    replica_set = k8s_lab.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets/{owner['name']}")
    assert replica_set["metadata"]["ownerReferences"][0]["name"] == "web"


def test_down_leaves_no_process_and_up_starts_again(k8s_lab: K8sLab) -> None:
    k8s_lab.down()
    assert k8s_lab.leftovers() == {}
    assert not k8s_lab.kubeconfig_path.exists()
    k8s_lab.up()  # the rest of the session (and a lab reused from before it) expects it up
    assert k8s_lab.is_healthy()
