# SPDX-License-Identifier: GPL-3.0-or-later
"""preflight.yml and node_prep.yml on real hosts: Debian 12 and 13 containers.

Four hosts (tests/lab/node_hosts.py: debootstrap roots with systemd as PID 1, Debian's
containerd, reached with the community.docker.docker connection) in two pools, their
Kubernetes Nodes in the lab's apiserver. Each host is prepared to fail checks as sites find
them: a swap entry in fstab, IP forwarding off, containerd and the kubelet's configuration
on other cgroup drivers and policies, a slurm user with Debian's ids, an MTU of its own, no
DNS, a shared filesystem missing, Nodes without their pool's labels and taints, a pod CIDR
over the hosts' network. The preflight must fail each with its id and fix and change
nothing; the operator then does what only a human can (mount, MTU, uid, DNS, the CIDR);
node_prep --check changes nothing; node_prep fixes the rest, a host at a time, after which
the preflight passes; pytest-testinfra checks the hosts; a second node_prep changes nothing.

The kernel and its clock are the machine's: its cgroup v1 hierarchy and unsynchronised clock
fail cgroup.unified and time.sync on every host (asserted), which the later runs waive. The
fs.inotify limits node_prep raises are the machine's too: the last user of dockerd puts them back
(docker_fixtures.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

import node_hosts
from ansible_runner import REPO, SITE, PlaybookRun, run_playbook
from docker_fixtures import SessionEngine
from k8s_lab import K8sLab
from kind_images import docker
from toolbox import LabError

pytest_plugins = ["k8s_fixtures", "docker_fixtures"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="dockerd and the lab need root"),
]

PREFLIGHT = REPO / "playbooks" / "preflight.yml"
NODE_PREP = REPO / "playbooks" / "node_prep.yml"
NETWORK = "hpcops-node-hosts"
SUBNET = "10.213.7.0/24"
SHARED = "/srv/shared"
# host: (Debian suite, pool)
HOSTS = {
    "hpcops-deb12-a": ("bookworm", "cpu"),
    "hpcops-deb12-b": ("bookworm", "cpu"),
    "hpcops-deb13-a": ("trixie", "interactive"),
    "hpcops-deb13-b": ("trixie", "interactive"),
}
POOLS = {
    "cpu": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm-cpu"}},
    "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
}
TAINTS = {"cpu": [{"key": "hpcops.io/slurm-only", "value": "true", "effect": "NoSchedule"}]}
KUBELET = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "cgroupDriver": "systemd",
    "cpuManagerPolicy": "static",
    "topologyManagerPolicy": "best-effort",
}
# What only the machine decides; asserted failing, then waived.
MACHINE_WIDE = ["cgroup.unified", "time.sync"]


def sh_in(host: str, script: str) -> str:
    return node_hosts.execute(host, "sh", "-ec", script)


def inventory(path: Path, report: Path, **overrides: t.Any) -> Path:
    variables: dict[str, t.Any] = {
        "slinky_kubeconfig": str(REPO / ".lab" / "kubeconfig"),
        "slurm_cluster_pools": POOLS,
        "node_prep_pool_taints": TAINTS,
        "node_prep_pod_cidr": "10.213.0.0/16",  # over the hosts' network: fixed below
        "node_prep_service_cidr": "10.96.0.0/12",
        "node_prep_site_networks": [SUBNET],
        "node_prep_shared_mounts": [SHARED],
        "node_prep_mtu": 1500,
        "node_prep_report_path": str(report),
        "node_prep_runtime_changes": True,
        # chronyd in a container would discipline the machine's clock.
        "node_prep_time_sync": False,
    }
    variables.update(overrides)
    pools: dict[str, t.Any] = {}
    for host, (_suite, pool) in HOSTS.items():
        pools.setdefault(f"slinky_pool_{pool}", {"hosts": {}})["hosts"][host] = {}
    document = {
        "all": {
            "vars": variables,
            "children": {
                "slinky_controller": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        }
                    }
                },
                "slinky_nodes": {
                    "vars": {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "ansible_become": False,  # root in the container, no sudo there
                        "ansible_pipelining": True,  # as inventories/kind: a docker exec a task
                    },
                    "children": pools,
                },
            },
        }
    }
    path.write_text(yaml.safe_dump(document))
    return path


class Site:
    """The hosts, their Nodes and the files the runs write."""

    def __init__(self, lab: K8sLab, workdir: Path) -> None:
        self.lab = lab
        self.workdir = workdir
        self.report = workdir / "preflight.json"

    def inventory(self, **overrides: t.Any) -> Path:
        return inventory(self.workdir / "hosts.yml", self.report, **overrides)

    def results(self) -> dict[tuple[str, str], dict[str, str]]:
        data = json.loads(self.report.read_text())
        return {(r["host"], r["check"]): r for r in data["results"]}

    def node(self, name: str) -> dict[str, t.Any]:
        return self.lab.get(f"/api/v1/nodes/{name}")


def snapshot(host: str) -> str:
    """What node_prep may change on a host, as text."""
    return sh_in(
        host,
        "cat /etc/fstab /etc/containerd/config.toml /var/lib/kubelet/config.yaml; "
        "cat /etc/default/grub 2>/dev/null || true; "
        "ls /etc/sysctl.d /etc/modules-load.d; sysctl -n net.ipv4.ip_forward",
    )


@pytest.fixture(scope="module")
def site(
    docker_engine: SessionEngine, k8s_lab: K8sLab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    try:
        node_hosts.ensure()
    except LabError as err:
        pytest.fail(f"building the Debian host images failed: {err}", pytrace=False)
    docker("network", "rm", NETWORK, check=False)
    docker("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        for host, (suite, _pool) in HOSTS.items():
            extra = [] if host == "hpcops-deb13-b" else ["--tmpfs", SHARED]
            node_hosts.start(host, suite, NETWORK, extra)
            kubelet = dict(KUBELET)
            if host == "hpcops-deb12-a":
                kubelet.update(cgroupDriver="cgroupfs", cpuManagerPolicy="none")
            sh_in(
                host,
                f"mkdir -p /var/lib/kubelet && cat > /var/lib/kubelet/config.yaml <<'EOF'\n"
                f"{yaml.safe_dump(kubelet)}EOF",
            )
            k8s_lab.request("DELETE", f"/api/v1/nodes/{host}")
            k8s_lab.apply(
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": host, "annotations": {"kwok.x-k8s.io/node": "fake"}},
                },
            )
        # What sites get wrong, one host each.
        sh_in("hpcops-deb12-a", "echo '/swapfile none swap sw 0 0' >> /etc/fstab")
        sh_in("hpcops-deb12-a", "sysctl -w net.ipv4.ip_forward=0")
        sh_in("hpcops-deb12-a", "echo 'GRUB_CMDLINE_LINUX=\"quiet\"' > /etc/default/grub")
        sh_in("hpcops-deb12-b", "groupadd -g 64030 slurm && useradd -u 64030 -g 64030 -M slurm")
        sh_in("hpcops-deb12-b", "ip link set eth0 mtu 1400")
        sh_in("hpcops-deb13-a", "sed -i 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf")
        yield Site(k8s_lab, tmp_path_factory.mktemp("node-prep"))
    finally:
        node_hosts.remove(*HOSTS)
        docker("network", "rm", NETWORK, check=False)
        for host in HOSTS:
            k8s_lab.request("DELETE", f"/api/v1/nodes/{host}")


def role_task(run: PlaybookRun, name: str) -> list[dict[str, t.Any]]:
    """Every host's result of the node_prep role's task called `name`."""
    return run.task_results(f"hpcops.slinky.node_prep : {name}")


def host_changes(run: PlaybookRun) -> dict[str, int]:
    return {host: run.stats(host).get("changed", 0) for host in HOSTS}


def test_preflight_fails_each_prepared_check_and_changes_nothing(site: Site) -> None:
    before = {host: snapshot(host) for host in HOSTS}
    run = run_playbook(PREFLIGHT, site.inventory())
    assert run.failed, "the preflight passed hosts prepared to fail it"
    assert "The preflight failed on" in " ".join(run.failures())
    assert host_changes(run) == dict.fromkeys(HOSTS, 0)
    assert {host: snapshot(host) for host in HOSTS} == before
    results = site.results()
    expected = [
        ("hpcops-deb12-a", "swap.off", "comments its /etc/fstab entries out"),
        ("hpcops-deb12-a", "sysctl.net.ipv4.ip_forward", "90-hpcops-slinky.conf"),
        ("hpcops-deb12-a", "kubelet.cgroup_driver", "node_prep_runtime_changes"),
        ("hpcops-deb12-a", "kubelet.cpu_manager_policy", "cpu_manager_state"),
        ("hpcops-deb12-b", "slurm.user", "usermod"),
        ("hpcops-deb12-b", "network.mtu", "MTU"),
        ("hpcops-deb13-a", "dns.nodes", "DNS"),
        ("hpcops-deb13-b", "mounts.shared", "mount the shared"),
        ("(site)", "network.cidrs", "node_prep_pod_cidr"),
    ]
    expected += [(host, "containerd.cgroup_driver", "SystemdCgroup") for host in HOSTS]
    expected += [(host, "node.labels", "kubectl label node") for host in HOSTS]
    expected += [(host, "network.overlap", "node_prep_pod_cidr") for host in HOSTS]
    expected += [(host, check, "") for host in HOSTS for check in MACHINE_WIDE]
    expected += [
        (host, "node.taints", "k8s_taint")
        for host, (_suite, pool) in HOSTS.items()
        if pool == "cpu"
    ]
    for host, check, fix in expected:
        result = results[(host, check)]
        assert result["status"] in ("fail", "warn"), result
        assert fix in result["fix"] and result["found"] and result["expected"], result
    passing = [(h, c) for (h, c), r in results.items() if r["status"] == "pass"]
    assert ("hpcops-deb12-b", "swap.off") in passing
    assert ("hpcops-deb13-b", "dns.nodes") in passing
    (shown,) = role_task(run, "Show every node and check")
    title, *table = shown["lines"]
    assert title.startswith("Preflight, node x check")
    assert table[0].split()[0] == "NODE" and len(table) == 1 + 1 + len(HOSTS)
    # On the terminal as a table, one line per host (show_table writes to stderr).
    assert re.search(r"^hpcops-deb12-a +", run.output, re.M)


def test_site_yml_stops_on_the_failed_preflight_before_any_change(site: Site) -> None:
    run = run_playbook(SITE, site.inventory())
    assert run.failed
    assert "The preflight failed on" in " ".join(run.failures())
    assert "Check the list of components" not in run.task_names()
    assert run.changed == 0


def fix_by_hand(site: Site) -> Path:
    """What node_prep leaves to people: the mount, the MTU, the uid, DNS and the CIDR."""
    sh_in("hpcops-deb13-b", f"mkdir -p {SHARED} && mount -t tmpfs shared {SHARED}")
    sh_in("hpcops-deb12-b", "ip link set eth0 mtu 1500")
    sh_in("hpcops-deb12-b", "groupmod -g 401 slurm && usermod -u 401 slurm")
    sh_in("hpcops-deb13-a", "sed -i 's/^hosts:.*/hosts: files dns/' /etc/nsswitch.conf")
    return prepared_inventory(site)


def prepared_inventory(site: Site) -> Path:
    return site.inventory(
        node_prep_pod_cidr="10.244.0.0/16",
        node_prep_waived_checks=MACHINE_WIDE,
        node_prep_kernel_cmdline_apply=True,  # cgroup v2 at the next boot, no reboot
    )


def test_node_prep_in_check_mode_changes_nothing(site: Site) -> None:
    hosts = fix_by_hand(site)
    before = {host: snapshot(host) for host in HOSTS}
    labels = {host: site.node(host)["metadata"].get("labels") for host in HOSTS}
    run = run_playbook(NODE_PREP, hosts, check=True, diff=True)
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    assert {host: snapshot(host) for host in HOSTS} == before
    assert {host: site.node(host)["metadata"].get("labels") for host in HOSTS} == labels
    assert any(host_changes(run).values()), "check mode reported nothing to change"


def test_node_prep_fixes_what_it_may_then_the_preflight_passes(site: Site) -> None:
    run = run_playbook(
        NODE_PREP,
        prepared_inventory(site),
    )
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    assert all(host_changes(run).values())
    results = site.results()
    assert {k: r for k, r in results.items() if r["status"] in ("fail", "warn")} == {}
    for host in HOSTS:
        for check in MACHINE_WIDE:
            assert results[(host, check)]["status"] == "waived"
    for host, (_suite, pool) in HOSTS.items():
        node = site.node(host)
        assert (
            node["metadata"]["labels"]["hpcops.io/pool"]
            == POOLS[pool]["node_selector"]["hpcops.io/pool"]
        )
        taints = {(x["key"], x["effect"]) for x in node["spec"].get("taints", [])}
        assert (("hpcops.io/slurm-only", "NoSchedule") in taints) == (pool == "cpu")


@pytest.mark.parametrize("host", list(HOSTS))
def test_hosts_after_node_prep(site: Site, host: str) -> None:
    node = testinfra.get_host(f"docker://{host}")
    assert node.sysctl("net.ipv4.ip_forward") == 1
    assert node.file("/etc/sysctl.d/90-hpcops-slinky.conf").contains("^net.ipv4.ip_forward=1$")
    # No /proc/modules at all on a kernel without module support (this machine's).
    loaded = {line.split()[0] for line in node.run("cat /proc/modules").stdout.splitlines()}
    for module in ("overlay", "br_netfilter"):
        # A loadable module is listed for the next boot; a built-in one (this machine's
        # kernel has both built in) needs nothing.
        assert node.file(f"/etc/modules-load.d/{module}.conf").exists == (module in loaded)
    assert not node.file("/etc/fstab").contains(r"^/swapfile\s")
    if host == "hpcops-deb12-a":
        grub = node.file("/etc/default/grub").content_string
        assert grub == 'GRUB_CMDLINE_LINUX="quiet systemd.unified_cgroup_hierarchy=1"\n'

    config = node.file("/etc/containerd/config.toml").content_string
    assert "SystemdCgroup = true" in config
    assert node.service("containerd").is_running
    kubelet = yaml.safe_load(node.file("/var/lib/kubelet/config.yaml").content_string)
    assert kubelet["cgroupDriver"] == "systemd"
    assert kubelet["cpuManagerPolicy"] == "static"
    assert node.run("containerd config dump").stdout.count("SystemdCgroup = true") >= 1


def test_node_prep_again_changes_nothing(site: Site) -> None:
    run = run_playbook(
        NODE_PREP,
        prepared_inventory(site),
    )
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    assert host_changes(run) == dict.fromkeys(HOSTS, 0), run.changed_tasks()


def bad_inventory(path: Path, groups: dict[str, list[str]], **variables: t.Any) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    children = {name: {"hosts": dict.fromkeys(hosts, local)} for name, hosts in groups.items()}
    document = {
        "all": {
            "vars": {"slurm_cluster_pools": POOLS, **variables},
            "children": {"slinky_controller": {"hosts": {"localhost": local}}, **children},
        }
    }
    path.write_text(yaml.safe_dump(document))
    return path


GOOD_GROUPS = {
    "slinky_nodes": ["c1", "i1"],
    "slinky_pool_cpu": ["c1"],
    "slinky_pool_interactive": ["i1"],
}


@pytest.mark.parametrize(
    ("groups", "variables", "message"),
    [
        (
            {**GOOD_GROUPS, "slinky_nodes": ["c1", "i1", "x1"]},
            {},
            "host x1 is in group slinky_nodes but in no pool group",
        ),
        (
            {"slinky_nodes": ["c1"], "slinky_pool_cpu": ["c1"]},
            {},
            "pool interactive of slurm_cluster_pools has no hosts",
        ),
        (
            GOOD_GROUPS,
            {"node_prep_service_cidr": "10.96.0.0"},
            "node_prep_service_cidr: '10.96.0.0' is not a network",
        ),
        (
            {**GOOD_GROUPS, "slinky_pool_interactive": ["i1", "c1"]},
            {},
            "host c1 is in slinky_pool_cpu and slinky_pool_interactive",
        ),
    ],
    ids=["host-in-no-pool", "pool-without-hosts", "not-a-cidr", "host-in-two-pools"],
)
def test_bad_inventory_stops_before_anything_runs(
    tmp_path: Path, groups: dict[str, list[str]], variables: dict[str, t.Any], message: str
) -> None:
    hosts = bad_inventory(tmp_path / "hosts.yml", groups, **variables)
    for playbook in (PREFLIGHT, NODE_PREP):
        run = run_playbook(playbook, hosts)
        assert run.failed
        assert any(message in failure for failure in run.failures()), run.failures()
        assert (
            "hpcops.slinky.node_prep : Check the inventory's node hosts and networks"
            in run.task_names()
        )
        assert role_task(run, "Read the host") == []
