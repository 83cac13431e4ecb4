# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad inventories stop site.yml before anything changes, with the variable's name and the fix."""

from __future__ import annotations

import typing as t

import pytest
from ansible_runner import LAB_INVENTORY, SITE, run_playbook
from k8s_binaries import LAB_SLINKY_VERSION
from k8s_lab import STORAGE_CLASS

pytest_plugins = ["k8s_fixtures"]
MERGE = "application/merge-patch+json"
pytestmark = pytest.mark.integration

# The lab's Slinky release, and a release of the other line.
LAB_LINE = LAB_SLINKY_VERSION.lstrip("v")
OTHER_LINE = "1.1.0" if LAB_LINE.startswith("1.2.") else "1.2.1"
LAB_POOLS = {
    "hpc": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm"}},
    "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
    "burst": {
        "kind": "dedicated",
        "node_selector": {"hpcops.io/pool": "burst"},
        "autoscale": {"min_replicas": 0, "max_replicas": 2},
    },
}
ALL_COMPONENTS = ["cert_manager", "slurm_operator", "slurm_cluster", "gpu_operator", "keda"]

# (id, extra vars, the variable the message must name, a word of the fix). One case or two
# per place a refusal is made (the site's list of components, each role's argument specs,
# chart sources, the Slinky release, the values of each component, and what only the
# cluster can say); the slurm chart values' many refusals are each a unit test
# (test_slurm_cluster_values.py): each run here costs about 15 s of CPU.
CASES: list[tuple[str, dict[str, t.Any], str, str]] = [
    (
        "pool-with-no-nodes",
        {
            "slurm_cluster_pools": {
                **LAB_POOLS,
                "ghost": {"node_selector": {"hpcops.io/pool": "nowhere"}},
            }
        },
        "slurm_cluster_pools.ghost.node_selector",
        "selects no Kubernetes node",
    ),
    (
        "cgroup-key-removed-from-slurm",
        {"slurm_cluster_cgroup": {"CgroupAutomount": True}},
        "slurm_cluster_cgroup.CgroupAutomount",
        "slurmd refuses",
    ),
    (
        "more-replicas-than-nodes",
        {"slurm_cluster_pools": {**LAB_POOLS, "hpc": {**LAB_POOLS["hpc"], "replicas": 5}}},
        "slurm_cluster_pools.hpc.replicas",
        "add nodes",
    ),
    ("pools-not-a-mapping", {"slurm_cluster_pools": ["hpc"]}, "slurm_cluster_pools", "dict"),
    (
        "slurm-chart-of-another-slinky-line",
        {"slurm_cluster_chart_version": OTHER_LINE},
        f"slurm_operator_chart_version ({LAB_LINE}), slurm_cluster_chart_version ({OTHER_LINE})",
        "different Slinky lines",
    ),
    (
        "slinky-release-not-deployed",
        {"slinky_version": "1.3.0"},
        "slinky_version",
        "1.2.2",
    ),
    (
        "service-monitor-without-its-crd",
        {"slurm_cluster_service_monitor": True},
        "slurm_cluster_service_monitor",
        "no ServiceMonitor CRD",
    ),
    (
        "unknown-component",
        {"slinky_components": ["slurm_cluster", "grafana"]},
        "slinky_components",
        "list some of",
    ),
    (
        "chart-mirror-missing",
        {"slurm_operator_chart": {"path": "/nonexistent/mirror/slurm-operator-1.1.0.tgz"}},
        "slurm_operator_chart",
        "mirror",
    ),
    (
        "chart-registry-unreachable",
        {"slurm_cluster_chart": {"oci": "oci://127.0.0.1:1/charts/slurm"}},
        "slurm_cluster_chart",
        "mirror",
    ),
    (
        "cert-manager-registry-unreachable",
        {"cert_manager_chart": {"oci": "oci://127.0.0.1:1/charts/cert-manager"}},
        "cert_manager_chart",
        "mirror",
    ),
    (
        "gpu-operator-repository-unreachable",
        {
            "slinky_components": ALL_COMPONENTS,
            "gpu_operator_chart": {"repo": "http://127.0.0.1:1/nvidia", "name": "gpu-operator"},
        },
        "gpu_operator_chart",
        "mirror",
    ),
    (
        "keda-repository-unreachable",
        {
            "keda_install": True,
            "keda_chart": {"repo": "http://127.0.0.1:1/kedacore", "name": "keda"},
        },
        "keda_chart",
        "mirror",
    ),
    (
        "autoscale-without-prometheus",
        {"keda_prometheus_url": ""},
        "keda_prometheus_url",
        "Prometheus",
    ),
    (
        "unknown-keda-metrics-source",
        {"keda_metrics_source": "influxdb"},
        "keda_metrics_source",
        "prometheus, slurmctld",
    ),
    (
        "controller-storage-class-missing",
        {"slurm_cluster_values": {"controller": {"persistence": {"storageClassName": "nvme"}}}},
        "slurm_cluster_values.controller.persistence.storageClassName",
        "no StorageClass nvme",
    ),
    (
        "accounting-without-its-database-secret",
        {"slurm_cluster_accounting": True},
        "slurm_cluster_accounting_database.password_secret",
        "no Secret mariadb-password with the key password",
    ),
    (
        "mariadb-name-not-a-service-name",
        {"slinky_components": ["mariadb", "slurm_cluster"], "mariadb_name": "Slurm_DB"},
        "mariadb_name",
        "use lower-case letters, digits and -",
    ),
    (
        "mariadb-storage-without-a-size",
        {"slinky_components": ["mariadb", "slurm_cluster"], "mariadb_storage": {"size": "big"}},
        "mariadb_storage.size",
        "give one such as 16Gi",
    ),
    (
        "login-service-with-no-load-balancer",
        {"slurm_cluster_login_sets": {"team-a": {}}},
        "slurm_cluster_login_sets.team-a.service.type",
        "add metallb to slinky_components",
    ),
    (
        "login-set-on-the-lendable-pool",
        {
            "slurm_cluster_login_sets": {
                "team-a": {
                    "node_selector": {"hpcops.io/pool": "interactive"},
                    "service": {"type": "NodePort"},
                }
            }
        },
        "slurm_cluster_login_sets.team-a.node_selector",
        "select nodes that are never lent",
    ),
    (
        "directory-bind-password-secret-missing",
        {
            "slurm_cluster_directory": {
                "uris": ["ldap://127.0.0.1:1"],
                "base_dn": "dc=example,dc=org",
                "bind_dn": "cn=reader,dc=example,dc=org",
                "bind_password_secret": {"name": "hpcops-no-such-secret", "key": "password"},
            }
        },
        "slurm_cluster_directory.bind_password_secret: there is no Secret hpcops-no-such-secret",
        "create it",
    ),
    (
        "metallb-pool-outside-the-nodes-network",
        {
            "slinky_components": ["metallb", "slurm_cluster"],
            "metallb_node_networks": ["192.0.2.0/24"],
            "metallb_address_pools": [{"name": "login", "addresses": ["198.51.100.0/28"]}],
        },
        "metallb_address_pools[0].addresses[0]",
        "is not inside the nodes' networks (192.0.2.0/24)",
    ),
    (
        "bridge-pool-over-the-lendable-nodes",
        {
            "slinky_components": ["slurm_cluster", "slurm_bridge"],
            "slurm_cluster_pools": {
                **LAB_POOLS,
                "bridge": {"kind": "bridge", "node_selector": {"hpcops.io/pool": "interactive"}},
            },
        },
        "slurm_cluster_pools.interactive.node_selector",
        "give each pool node_selector labels no other pool's nodes have",
    ),
    (
        "chart-source-two-forms",
        {
            "slurm_cluster_chart": {
                "oci": "oci://127.0.0.1:1/charts/slurm",
                "path": "/srv/slurm.tgz",
            }
        },
        "slurm_cluster_chart",
        "exactly one of",
    ),
]


def snapshot(lab: t.Any) -> dict[str, t.Any]:
    """What a run that changes something would change: releases, namespaces, NodeSets, Secrets."""

    def versions(path: str) -> dict[str, str]:
        status, body = lab.request("GET", path)
        if status == 404:  # the CRDs are not installed yet
            return {}
        # The spec's generation where there is one: the operator keeps updating the status.
        return {
            f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": str(
                i["metadata"].get("generation", i["metadata"]["resourceVersion"])
            )
            for i in body["items"]
        }

    return {
        "secrets": versions("/api/v1/secrets"),
        "namespaces": versions("/api/v1/namespaces"),
        "nodesets": versions("/apis/slinky.slurm.net/v1beta1/nodesets"),
        "scaledobjects": versions("/apis/keda.sh/v1alpha1/scaledobjects"),
    }


@pytest.mark.parametrize(
    ("extra_vars", "variable", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_inventory_is_rejected_before_any_change(
    k8s_lab: t.Any, extra_vars: dict[str, t.Any], variable: str, fix: str
) -> None:
    before = snapshot(k8s_lab)
    run = run_playbook(SITE, LAB_INVENTORY, extra_vars=extra_vars)
    assert run.failed
    messages = run.failures()
    assert messages, run.output[-2000:]
    assert any(variable in m and fix in m for m in messages), messages
    assert "Traceback" not in run.output
    assert run.changed == 0
    assert snapshot(k8s_lab) == before


def test_no_default_storage_class_is_named_before_any_change(k8s_lab: t.Any) -> None:
    """A bare-metal cluster with no StorageClass marked default: slurmctld's claim would stay
    Pending, and its pod with it (slurm-operator #52)."""
    path = f"/apis/storage.k8s.io/v1/storageclasses/{STORAGE_CLASS}"
    annotation = "storageclass.kubernetes.io/is-default-class"

    def mark(default: str) -> None:
        status, body = k8s_lab.request(
            "PATCH", path, {"metadata": {"annotations": {annotation: default}}}, content_type=MERGE
        )
        assert status == 200, body

    before = snapshot(k8s_lab)
    mark("false")
    try:
        run = run_playbook(SITE, LAB_INVENTORY)
    finally:
        mark("true")
    assert run.failed
    messages = run.failures()
    assert any(
        m.startswith("slurm_cluster_values.controller.persistence.storageClassName: unset")
        and f"has none marked default (it has {STORAGE_CLASS})" in m
        for m in messages
    ), messages
    assert run.changed == 0
    assert snapshot(k8s_lab) == before
