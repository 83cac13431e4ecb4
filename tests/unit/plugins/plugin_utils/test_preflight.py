# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight's judgement (pure): each check passes on a ready host and fails, with its
id and fix, on a host prepared to fail it; the inventory checks; the report."""

from __future__ import annotations

import copy
import typing as t
from pathlib import Path

import pytest

from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight import report
from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.checks import (
    FAIL,
    PASS,
    SITE,
    SKIP,
    WAIVED,
    WARN,
    HostInput,
    PoolSettings,
    Settings,
    containerd_runc,
    evaluate,
    kubelet_config,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.inventory import (
    batch_size,
    inventory_problems,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures/preflight"
# containerd 1.6.20's `config dump` (Debian 12), with the systemd cgroup driver turned on.
CONTAINERD_DUMP = (FIXTURES / "containerd-1.6.20-dump.toml").read_text()
READY_CONTAINERD = CONTAINERD_DUMP.replace("SystemdCgroup = false", "SystemdCgroup = true")
KUBELET = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cpuManagerPolicy: static
topologyManagerPolicy: best-effort
"""


def ready_facts(name: str = "node1", address: str = "192.168.10.11/24") -> dict[str, t.Any]:
    """What node_preflight_facts reads on a host where every check passes."""
    return {
        "hostname": name,
        "os": {"id": "debian", "version_id": "12"},
        "kernel": {"release": "6.1.0-28-amd64"},
        "cgroup": {"mode": "unified", "controllers": ["cpu", "cpuset", "io", "memory", "pids"]},
        "sysctls": {"net.ipv4.ip_forward": "1", "fs.inotify.max_user_instances": "8192"},
        "kernel_modules": {"overlay": "loaded", "br_netfilter": "loaded"},
        "swap": {"devices": [], "total_kib": 0, "fstab": []},
        "kubelet": {"config_path": "/var/lib/kubelet/config.yaml", "config": KUBELET, "flags": {}},
        "containerd": {"installed": True, "version": "1.6.20", "config": READY_CONTAINERD},
        "nvidia": {"module_loaded": False, "driver_version": None, "nvswitch": False},
        "clock": {"synchronized": True, "services": ["chrony"]},
        "resolve": {"node1": ["192.168.10.11"], "node2": ["192.168.10.12"]},
        "network": {
            "links": [{"name": "eth0", "mtu": 9000, "addresses": [address]}],
            "default": "eth0",
        },
        "slurm_user": None,
        "mounts": {"/home": {"source": "nfs:/home", "fstype": "nfs4"}},
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, t.Any]:
    labels = {"hpcops.io/pool": "cpu"} if labels is None else labels
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def settings(**overrides: t.Any) -> Settings:
    values: dict[str, t.Any] = {
        "pools": {"cpu": PoolSettings(kind="dedicated", labels={"hpcops.io/pool": "cpu"})},
        "slurm_version": "26.05",
        "kernel_modules": ["overlay", "br_netfilter"],
        "sysctls": {"net.ipv4.ip_forward": "1", "fs.inotify.max_user_instances": ">=8192"},
        "cpu_manager_policy": "static",
        "topology_manager_policy": "best-effort",
        "pod_cidr": "10.244.0.0/16",
        "service_cidr": "10.96.0.0/12",
        "site_networks": ["192.168.10.0/24"],
        "shared_mounts": ["/home"],
    }
    values.update(overrides)
    return Settings(**values)


def run(
    facts: dict[str, t.Any], *, config: Settings | None = None, nodes: list[t.Any] | None = None
) -> dict[str, t.Any]:
    hosts = [
        HostInput("node1", "cpu", "node1", facts),
        HostInput("node2", "cpu", "node2", ready_facts("node2", "192.168.10.12/24")),
    ]
    results = evaluate(
        hosts, [node("node1"), node("node2")] if nodes is None else nodes, config or settings()
    )
    return {r.check: r for r in results if r.host == "node1"}


def test_a_ready_host_passes_every_check() -> None:
    results = run(ready_facts())
    assert {c: r.status for c, r in results.items() if r.status != PASS} == {
        "containerd.cdi": SKIP,
        "nvidia.driver": SKIP,
        "nvidia.fabricmanager": SKIP,
    }
    assert all(not r.fix for r in results.values() if r.status == PASS)


def _set(facts: dict[str, t.Any], path: str, value: t.Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        facts = facts[key]
    facts[last] = value


# A host prepared to fail each check: (check id, the facts changed, a word of the fix).
BROKEN = [
    ("cgroup.unified", {"cgroup.mode": "hybrid"}, "systemd.unified_cgroup_hierarchy=1"),
    ("cgroup.controllers", {"cgroup.controllers": ["cpu", "memory"]}, "cgroup_enable"),
    ("kernel.version", {"kernel.release": "4.19.0-27-amd64"}, "newer kernel"),
    ("kernel.modules", {"kernel_modules.br_netfilter": "missing"}, "modules-load.d"),
    ("sysctl.net.ipv4.ip_forward", {"sysctls.net.ipv4.ip_forward": "0"}, "sysctl.d"),
    (
        "sysctl.fs.inotify.max_user_instances",
        {"sysctls.fs.inotify.max_user_instances": "128"},
        "sysctl.d",
    ),
    ("swap.off", {"swap.total_kib": 4194304}, "swap off"),
    ("containerd.cgroup_driver", {"containerd.config": CONTAINERD_DUMP}, "SystemdCgroup"),
    ("kubelet.config", {"kubelet.config": None}, "kubeadm join"),
    (
        "kubelet.cgroup_driver",
        {"kubelet.config": KUBELET.replace("systemd", "cgroupfs")},
        "node_prep_runtime_changes",
    ),
    (
        "kubelet.cpu_manager_policy",
        {"kubelet.config": KUBELET.replace("static", "none")},
        "cpu_manager_state",
    ),
    (
        "kubelet.topology_manager_policy",
        {"kubelet.config": KUBELET.replace("best-effort", "none")},
        "drained",
    ),
    ("time.sync", {"clock.synchronized": False, "clock.services": []}, "chrony"),
    ("dns.nodes", {"resolve.node2": []}, "DNS"),
    (
        "network.overlap",
        {"network.links": [{"name": "eth0", "mtu": 9000, "addresses": ["10.244.3.7/24"]}]},
        "node_prep_pod_cidr",
    ),
    (
        "network.mtu",
        {"network.links": [{"name": "eth0", "mtu": 1500, "addresses": ["192.168.10.11/24"]}]},
        "MTU",
    ),
    ("slurm.user", {"slurm_user": {"uid": 64030, "gid": 64030, "group": "slurm"}}, "usermod"),
    ("mounts.shared", {"mounts./home": None}, "mount the shared"),
]


@pytest.mark.parametrize(("check", "changes", "fix"), BROKEN, ids=[b[0] for b in BROKEN])
def test_each_check_fails_on_a_host_prepared_to_fail_it(
    check: str, changes: dict[str, t.Any], fix: str
) -> None:
    facts = copy.deepcopy(ready_facts())
    for path, value in changes.items():
        if (
            path.startswith("sysctls.")
            or path.startswith("kernel_modules.")
            or path.startswith("resolve.")
            or path.startswith("mounts.")
        ):
            head, key = path.split(".", 1)
            facts[head][key] = value
        else:
            _set(facts, path, value)
    result = run(facts)[check]
    assert result.status in (FAIL, WARN), result
    assert fix in result.fix, result.fix
    assert result.found and result.expected


def test_swap_is_a_warning_when_the_kubelet_tolerates_it() -> None:
    facts = ready_facts()
    facts["swap"]["total_kib"] = 1024
    facts["kubelet"]["config"] = KUBELET + "failSwapOn: false\n"
    assert run(facts)["swap.off"].status == WARN


def test_waived_checks_show_as_waived_not_failed() -> None:
    facts = ready_facts()
    facts["cgroup"]["mode"] = "hybrid"
    facts["sysctls"]["net.ipv4.ip_forward"] = "0"
    results = run(facts, config=settings(waived=["cgroup.unified", "sysctl.*"]))
    assert results["cgroup.unified"].status == WAIVED
    assert results["sysctl.net.ipv4.ip_forward"].status == WAIVED


def test_gpu_pool_with_a_preinstalled_driver_expected() -> None:
    config = settings(pools={"cpu": PoolSettings("dedicated", {"hpcops.io/pool": "cpu"}, gpu=True)})
    results = run(ready_facts(), config=config)
    assert results["nvidia.driver"].status == FAIL
    assert "gpu_operator_driver_managed: true" in results["nvidia.driver"].fix
    assert results["containerd.cdi"].status == FAIL  # containerd 1.6 has no CDI
    facts = ready_facts()
    facts["nvidia"] = {
        "module_loaded": True,
        "driver_version": "595.91.07",
        "nvswitch": True,
        "fabricmanager_active": False,
    }
    results = run(facts, config=config)
    assert results["nvidia.driver"].status == PASS
    assert results["nvidia.fabricmanager"].status == FAIL


def test_gpu_pool_with_a_managed_driver_refuses_a_host_driver() -> None:
    config = settings(
        pools={"cpu": PoolSettings("dedicated", {"hpcops.io/pool": "cpu"}, gpu=True)},
        gpu_driver_managed=True,
    )
    facts = ready_facts()
    facts["nvidia"] = {"module_loaded": True, "driver_version": "550.54.15", "nvswitch": False}
    result = run(facts, config=config)["nvidia.driver"]
    assert result.status == FAIL and "gpu_operator_driver_managed: false" in result.fix


def test_node_labels_and_taints_come_from_the_pool() -> None:
    taint = {"key": "hpcops.io/slurm", "value": "true", "effect": "NoSchedule"}
    config = settings(pools={"cpu": PoolSettings("dedicated", {"hpcops.io/pool": "cpu"}, [taint])})
    results = run(ready_facts(), config=config, nodes=[node("node1", {}), node("node2")])
    assert results["node.labels"].status == FAIL
    assert "kubectl label node node1 hpcops.io/pool=cpu" in results["node.labels"].fix
    assert results["node.taints"].status == FAIL
    missing = run(ready_facts(), nodes=[node("node2")])
    assert "no Kubernetes Node named node1" in missing["node.labels"].found


def test_an_unreadable_host_fails_once() -> None:
    results = run({})
    assert results["host.reachable"].status == FAIL
    assert len(results) == 1


def test_site_networks_must_not_overlap() -> None:
    results = evaluate([], [], settings(site_networks=["10.96.0.0/16"]))
    (site,) = [r for r in results if r.host == SITE]
    assert site.status == FAIL and "service 10.96.0.0/12 overlaps site 10.96.0.0/16" in site.found


def test_containerd_cri_of_both_config_versions() -> None:
    assert containerd_runc({"containerd": {"config": CONTAINERD_DUMP}}) == {
        "version": 2,
        "systemd_cgroup": False,
        "enable_cdi": False,
        "runtime": "runc",
    }
    v3 = """version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
    assert containerd_runc({"containerd": {"config": v3}})["enable_cdi"] is True
    assert containerd_runc({"containerd": {"config": v3}})["systemd_cgroup"] is True
    assert "error" in containerd_runc({"containerd": {"config": "version = ["}})


def test_kubelet_settings_merge_file_dropins_and_flags() -> None:
    merged = kubelet_config(
        {
            "kubelet": {
                "config": KUBELET,
                "dropins": {
                    "20-b.conf": "cpuManagerPolicy: none\n",
                    "10-a.conf": "cpuManagerPolicy: static\nfailSwapOn: false\n",
                },
                "flags": {"cgroup-driver": "cgroupfs"},
            }
        }
    )
    assert merged["cpuManagerPolicy"] == "none"  # drop-ins in name order, the last wins
    assert merged["cgroupDriver"] == "cgroupfs"  # flags win over files
    assert merged["failSwapOn"] is False


def test_report_table_and_problems() -> None:
    facts = ready_facts()
    facts["swap"]["total_kib"] = 2048
    results = [
        r.as_dict()
        for r in evaluate(
            [
                HostInput("node1", "cpu", "node1", facts),
                HostInput("node2", "cpu", "node2", ready_facts("node2", "192.168.10.12/24")),
            ],
            [node("node1"), node("node2")],
            settings(),
        )
    ]
    table = report.table(results)
    assert table[0].split()[:4] == ["NODE", "NETWORK", "HOST", "CGROUP"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    swap_column = table[0].split().index("SWAP")
    assert rows["node1"][swap_column] == "FAIL" and rows["node2"][swap_column] == "ok"
    assert len({len(line) for line in table}) >= 1
    (problem,) = report.problems(results)
    assert problem.startswith("FAIL node1 swap.off: found 2 MiB swap on")
    summary = report.summary(results)
    assert summary["failed_hosts"] == ["node1"] and not summary["ok"]


def inventory(**overrides: t.Any) -> list[str]:
    values: dict[str, t.Any] = {
        "groups": {
            "slinky_nodes": ["c1", "c2", "i1", "i2"],
            "slinky_pool_cpu": ["c1", "c2"],
            "slinky_pool_interactive": ["i1", "i2"],
        },
        "pools": ["cpu", "interactive"],
        "prefix": "slinky_pool_",
        "node_group": "slinky_nodes",
        "node_names": {},
        "networks": {
            "node_prep_pod_cidr": "10.244.0.0/16",
            "node_prep_site_networks": ["192.168.0.0/16"],
        },
        "gpu_pools": [],
        "batch": 1,
    }
    values.update(overrides)
    return inventory_problems(**values)


def test_a_good_inventory_has_no_problems() -> None:
    assert inventory() == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {
                "groups": {
                    "slinky_nodes": ["c1", "c2", "x"],
                    "slinky_pool_cpu": ["c1", "c2"],
                    "slinky_pool_interactive": ["i1"],
                }
            },
            "host x is in group slinky_nodes but in no pool group",
        ),
        (
            {"groups": {"slinky_nodes": ["c1", "c2"], "slinky_pool_cpu": ["c1", "c2"]}},
            "pool interactive of slurm_cluster_pools has no hosts",
        ),
        (
            {"networks": {"node_prep_pod_cidr": "10.244.0.0/33"}},
            "node_prep_pod_cidr: '10.244.0.0/33' is not a network",
        ),
        (
            {"networks": {"node_prep_site_networks": ["192.168.1.7/16"]}},
            "node_prep_site_networks: '192.168.1.7/16'",
        ),
        (
            {
                "groups": {
                    "slinky_nodes": ["c1", "c2", "i1"],
                    "slinky_pool_cpu": ["c1", "c2"],
                    "slinky_pool_interactive": ["i1", "c2"],
                }
            },
            "host c2 is in slinky_pool_cpu and slinky_pool_interactive",
        ),
        (
            {
                "groups": {
                    "slinky_nodes": ["c1", "c2", "i1", "i2"],
                    "slinky_pool_cpu": ["c1", "c2"],
                    "slinky_pool_interactive": ["i1", "i2"],
                    "slinky_pool_gpu": ["g1"],
                }
            },
            "inventory group slinky_pool_gpu: slurm_cluster_pools has no pool 'gpu'",
        ),
        ({"node_names": {"c2": "c1"}}, "hosts c1 and c2 both map to Kubernetes Node c1"),
        (
            {"batch": "50%"},
            "node_prep_batch: 2 hosts per batch could restart all 2 hosts of pool cpu",
        ),
        ({"batch": "many"}, "node_prep_batch: 'many'"),
        ({"gpu_pools": ["gpu"]}, "node_prep_gpu_pools: no pool 'gpu'"),
    ],
)
def test_bad_inventories_name_the_variable(change: dict[str, t.Any], message: str) -> None:
    problems = inventory(**change)
    assert any(message in p for p in problems), problems


def test_batch_size_follows_ansible_serial() -> None:
    assert batch_size("10%", 25) == 2
    assert batch_size("1%", 25) == 1
    assert batch_size(3, 2) == 2
