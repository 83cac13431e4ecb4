# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the preflight's judgement of what `host_facts` read, against the inventory.

Pure: `evaluate` takes every host's facts, the Kubernetes Node objects and the settings,
and returns one `CheckResult` per host and check. Each check has a stable id (sites waive
checks by id, other tools read them from the JSON report), a severity (what a failure is:
`fail` stops site.yml, `warn` does not), what was found, what was expected and the fix.
"""

from __future__ import annotations

import re
import tomllib
import typing as t
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import yaml

# Outcomes of a check on a host.
PASS = "pass"  # noqa: S105 - an outcome, not a password
WARN = "warn"
FAIL = "fail"
WAIVED = "waived"  # failed or warned, and the site accepts it (node_prep_waived_checks)
SKIP = "skip"  # does not apply to this host (for example a GPU check on a CPU pool)
STATUSES = (PASS, WARN, FAIL, WAIVED, SKIP)

SITE = "(site)"  # the row of checks that belong to the inventory, not to a host

# Kubernetes needs cgroup v2 support from Linux 5.8 (kubernetes.io, "About cgroup v2").
DEFAULT_KERNEL_MIN = "5.8"
# What slurmd's cgroup/v2 plugin and the kubelet constrain jobs and pods with.
REQUIRED_CONTROLLERS = ("cpu", "cpuset", "memory", "pids")


@dataclass(frozen=True)
class CheckResult:
    host: str
    check: str
    severity: str  # FAIL or WARN: what it is when it does not pass
    status: str
    found: str = ""
    expected: str = ""
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class HostInput:
    """One host as the preflight sees it: its pool, its Kubernetes Node and its facts."""

    name: str
    pool: str
    node_name: str
    facts: Mapping[str, t.Any]


@dataclass
class PoolSettings:
    kind: str  # dedicated or lendable
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    gpu: bool = False


@dataclass
class Settings:
    pools: dict[str, PoolSettings]
    slurm_version: str = "26.05"
    cgroup_driver: str = "systemd"
    kernel_min: str = DEFAULT_KERNEL_MIN
    kernel_modules: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    cpu_manager_policy: str = ""
    topology_manager_policy: str = ""
    gpu_driver_managed: bool = False
    gpu_cdi: bool = True
    pod_cidr: str = ""
    service_cidr: str = ""
    site_networks: list[str] = field(default_factory=list)
    mtu: int = 0  # 0: the pool agrees with itself
    shared_mounts: list[str] = field(default_factory=list)
    slurm_uid: int = 401
    slurm_gid: int = 401
    waived: list[str] = field(default_factory=list)


class PreflightError(ValueError):
    """The preflight cannot run; the message names the setting and the fix."""


def require_netaddr() -> t.Any:
    """The netaddr library. Imported here, not at the top: Ansible imports every filter file
    of the collection in each task's worker process, and few tasks compare networks."""
    try:
        import netaddr  # noqa: PLC0415
    except ImportError:
        raise PreflightError(
            "the preflight compares networks with the Python library netaddr: install it on "
            "the controller (pip install netaddr)"
        ) from None
    return netaddr


class _Checker:
    """Collects the results of one host, so each check reads as one call."""

    def __init__(self, host: str, waived: Iterable[str]) -> None:
        self.host = host
        self.waived = set(waived)
        self.results: list[CheckResult] = []

    def add(
        self,
        check: str,
        ok: bool,
        *,
        found: str,
        expected: str,
        fix: str,
        severity: str = FAIL,
    ) -> None:
        status = PASS if ok else severity
        if status != PASS and _waived(check, self.waived):
            status = WAIVED
        self.results.append(
            CheckResult(self.host, check, severity, status, found, expected, "" if ok else fix)
        )

    def skip(self, check: str, why: str, severity: str = FAIL) -> None:
        self.results.append(CheckResult(self.host, check, severity, SKIP, why))


def _waived(check: str, waived: set[str]) -> bool:
    """A waiver names a check id or a prefix of ids ending in '*' (sysctl.*)."""
    return check in waived or any(w.endswith("*") and check.startswith(w[:-1]) for w in waived)


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text.split("-", maxsplit=1)[0])
    return tuple(int(n) for n in numbers[:3])


# --------------------------------------------------------------------------------------
# Configuration files, as the host gave them
# --------------------------------------------------------------------------------------


def kubelet_config(facts: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The kubelet's effective settings: file, then drop-ins in name order, then flags."""
    kubelet = facts.get("kubelet") or {}
    merged: dict[str, t.Any] = {}
    texts = [kubelet.get("config")] + [
        (kubelet.get("dropins") or {})[name] for name in sorted(kubelet.get("dropins") or {})
    ]
    for text in texts:
        if not text:
            continue
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(loaded, dict):
            merged.update(loaded)
    flags = kubelet.get("flags") or {}
    if "cgroup-driver" in flags:
        merged["cgroupDriver"] = flags["cgroup-driver"]
    if "fail-swap-on" in flags:
        merged["failSwapOn"] = flags["fail-swap-on"].lower() != "false"
    return merged


def containerd_runc(facts: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the preflight needs of containerd's CRI plugin: cgroup driver and CDI.

    containerd 1.x (config version 2) keeps both under io.containerd.grpc.v1.cri;
    containerd 2.x (version 3) under io.containerd.cri.v1.runtime.
    """
    text = (facts.get("containerd") or {}).get("config") or ""
    try:
        config = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError as err:
        return {"error": f"config does not parse: {err}"}
    plugins = config.get("plugins") or {}
    version = int(config.get("version") or 1)
    cri = plugins.get("io.containerd.cri.v1.runtime") or plugins.get("io.containerd.grpc.v1.cri")
    if cri is None:
        return {"error": "no CRI plugin section", "version": version}
    runtimes = (cri.get("containerd") or {}).get("runtimes") or {}
    default = (cri.get("containerd") or {}).get("default_runtime_name", "runc")
    options = (runtimes.get(default) or {}).get("options") or {}
    return {
        "version": version,
        "systemd_cgroup": bool(options.get("SystemdCgroup", False)),
        # containerd 2.x turns CDI on by default; 1.7 has it off; 1.6 does not know it.
        "enable_cdi": bool(cri.get("enable_cdi", version >= 3)),
        "runtime": default,
    }


# --------------------------------------------------------------------------------------
# Checks of one host
# --------------------------------------------------------------------------------------


def _cgroup_checks(c: _Checker, facts: Mapping[str, t.Any], settings: Settings) -> None:
    cgroup = facts.get("cgroup") or {}
    mode = cgroup.get("mode", "none")
    c.add(
        "cgroup.unified",
        mode == "unified",
        found=f"cgroup {mode} hierarchy" if mode != "unified" else "cgroup v2 (unified)",
        expected=(
            "cgroup v2 unified hierarchy at /sys/fs/cgroup: Slurm "
            f"{settings.slurm_version} constrains jobs with CgroupPlugin=cgroup/v2"
        ),
        fix=(
            "boot with systemd.unified_cgroup_hierarchy=1 on the kernel command line (a reboot; "
            "Debian 11+, RHEL 9 and Ubuntu 22.04+ default to it). Until then the kubelet 1.35+ "
            "starts only with failCgroupV1: false, and slurmd needs CgroupPlugin=cgroup/v1 "
            "(deprecated since Slurm 25.05) in slurm_cluster_cgroup"
        ),
    )
    controllers = set(cgroup.get("controllers") or [])
    missing = [name for name in REQUIRED_CONTROLLERS if name not in controllers]
    c.add(
        "cgroup.controllers",
        not missing,
        found="missing " + ", ".join(missing) if missing else ", ".join(sorted(controllers)),
        expected="controllers " + ", ".join(REQUIRED_CONTROLLERS),
        fix=(
            "enable the missing controllers on the kernel command line (for example "
            "cgroup_enable=cpuset, or remove cgroup_disable=...) and reboot"
        ),
    )


def _kernel_checks(c: _Checker, facts: Mapping[str, t.Any], settings: Settings) -> None:
    release = (facts.get("kernel") or {}).get("release", "")
    c.add(
        "kernel.version",
        _version_tuple(release) >= _version_tuple(settings.kernel_min),
        found=release or "unknown",
        expected=f"Linux {settings.kernel_min} or newer",
        fix="install a newer kernel from the distribution and reboot into it",
    )
    states = facts.get("kernel_modules") or {}
    missing = [name for name in settings.kernel_modules if states.get(name) == "missing"]
    c.add(
        "kernel.modules",
        not missing,
        found="not loaded: " + ", ".join(missing) if missing else "all loaded",
        expected="loaded: " + ", ".join(settings.kernel_modules),
        fix="node_prep loads them and lists them in /etc/modules-load.d/hpcops-slinky.conf",
    )
    values = facts.get("sysctls") or {}
    for name, wanted in sorted(settings.sysctls.items()):
        found = values.get(name)
        c.add(
            f"sysctl.{name}",
            _sysctl_ok(found, str(wanted)),
            found="absent" if found is None else str(found),
            expected=str(wanted),
            fix=(
                f"node_prep sets {name} and keeps it in /etc/sysctl.d/90-hpcops-slinky.conf"
                + (" (it appears once its module is loaded)" if found is None else "")
            ),
        )


def _sysctl_ok(found: str | None, wanted: str) -> bool:
    if found is None:
        return False
    if wanted.startswith(">="):
        try:
            return int(found.split()[0]) >= int(wanted[2:].strip())
        except ValueError:
            return False
    return found.split() == wanted.split()


def _swap_check(c: _Checker, facts: Mapping[str, t.Any], kubelet: Mapping[str, t.Any]) -> None:
    swap = facts.get("swap") or {}
    total = int(swap.get("total_kib") or 0)
    fstab = swap.get("fstab") or []
    fail_swap_on = kubelet.get("failSwapOn", True) not in (False, "false")
    found = f"{total // 1024} MiB swap on" if total else "no swap"
    if fstab:
        found += " (fstab: " + ", ".join(fstab) + ")"
    c.add(
        "swap.off",
        total == 0 and not fstab,
        found=found,
        expected="no swap: the kubelet and slurmd's memory limits count on it",
        fix="node_prep turns swap off and comments its /etc/fstab entries out",
        # The kubelet refuses to start with swap unless failSwapOn is false.
        severity=FAIL if fail_swap_on else WARN,
    )


def _runtime_checks(
    c: _Checker,
    facts: Mapping[str, t.Any],
    kubelet: Mapping[str, t.Any],
    settings: Settings,
    pool: PoolSettings,
) -> None:
    info = facts.get("containerd") or {}
    runc = containerd_runc(facts) if info.get("installed") else {"error": "not installed"}
    containerd_driver = (
        None if "error" in runc else ("systemd" if runc["systemd_cgroup"] else "cgroupfs")
    )
    c.add(
        "containerd.cgroup_driver",
        containerd_driver == settings.cgroup_driver,
        found=runc.get("error") or f"{containerd_driver} (containerd {info.get('version')})",
        expected=(
            f"{settings.cgroup_driver} "
            f"(SystemdCgroup = {str(settings.cgroup_driver == 'systemd').lower()})"
        ),
        fix=(
            "node_prep sets SystemdCgroup in containerd's config.toml and the kubelet's "
            "cgroupDriver together, then restarts both (with node_prep_runtime_changes: true; "
            "drain the node first)"
        ),
    )
    kubelet_present = bool((facts.get("kubelet") or {}).get("config"))
    kubelet_driver = kubelet.get("cgroupDriver", "cgroupfs") if kubelet_present else None
    c.add(
        "kubelet.config",
        kubelet_present,
        found=(facts.get("kubelet") or {}).get("config_path", "")
        + ("" if kubelet_present else " not found"),
        expected="the kubelet's configuration file",
        fix="join the host to the cluster (kubeadm join), or set node_prep_kubelet_config_path",
    )
    c.add(
        "kubelet.cgroup_driver",
        kubelet_driver == settings.cgroup_driver and kubelet_driver == containerd_driver,
        found=(
            f"kubelet {kubelet_driver or 'unknown (no configuration)'}, "
            f"containerd {containerd_driver or 'unknown'}"
        ),
        expected=f"both {settings.cgroup_driver}: a mismatch leaves pods outside their limits",
        fix=(
            "node_prep sets both (node_prep_runtime_changes: true; drain the node first); on "
            "kubeadm clusters also set cgroupDriver in the kubelet-config ConfigMap"
        ),
    )
    for key, wanted, what in (
        ("cpuManagerPolicy", settings.cpu_manager_policy, "node_prep_kubelet_cpu_manager_policy"),
        (
            "topologyManagerPolicy",
            settings.topology_manager_policy,
            "node_prep_kubelet_topology_manager_policy",
        ),
    ):
        check = "kubelet." + re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        if not wanted:
            c.skip(check, f"{what} is empty", WARN)
            continue
        found = str(kubelet.get(key, "none")) if kubelet_present else "no kubelet configuration"
        c.add(
            check,
            found == wanted,
            found=found,
            expected=f"{wanted} on a pool that runs Slurm jobs",
            fix=(
                f"set {key}: {wanted} in the kubelet configuration and restart the kubelet on "
                "a drained node"
                + (
                    ", without its old /var/lib/kubelet/cpu_manager_state"
                    if key == "cpuManagerPolicy"
                    else ""
                )
                + " (node_prep does it with node_prep_runtime_changes: true)"
            ),
            severity=WARN,
        )
    if not pool.gpu:
        c.skip("containerd.cdi", "not a GPU pool")
        return
    cdi = bool(runc.get("enable_cdi")) if "error" not in runc else False
    c.add(
        "containerd.cdi",
        cdi == settings.gpu_cdi or not settings.gpu_cdi,
        found=f"enable_cdi {str(cdi).lower()}",
        expected="enable_cdi true: the GPU operator hands devices to containers by CDI",
        fix="node_prep sets enable_cdi in containerd's config.toml (containerd 1.7 or newer)",
    )


def _gpu_checks(
    c: _Checker, facts: Mapping[str, t.Any], settings: Settings, pool: PoolSettings
) -> None:
    if not pool.gpu:
        c.skip("nvidia.driver", "not a GPU pool")
        c.skip("nvidia.fabricmanager", "not a GPU pool")
        return
    gpu = facts.get("nvidia") or {}
    loaded = bool(gpu.get("module_loaded"))
    version = gpu.get("driver_version") or "none"
    if settings.gpu_driver_managed:
        c.add(
            "nvidia.driver",
            not loaded,
            found=f"host driver {version} loaded" if loaded else "no host driver",
            expected="no host driver: the GPU operator's driver container loads its own",
            fix=(
                "remove the host's NVIDIA driver packages and reboot, or set "
                "gpu_operator_driver_managed: false to use the host's driver"
            ),
        )
        c.skip("nvidia.fabricmanager", "the operator's driver container runs it")
        return
    c.add(
        "nvidia.driver",
        loaded and version != "none",
        found=f"driver {version}" if loaded else "no NVIDIA kernel module loaded",
        expected="the NVIDIA driver installed and loaded (gpu_operator_driver_managed is false)",
        fix=(
            "install the NVIDIA driver from the distribution or NVIDIA's repository and reboot, "
            "or set gpu_operator_driver_managed: true"
        ),
    )
    if not gpu.get("nvswitch"):
        c.skip("nvidia.fabricmanager", "no NVSwitch")
        return
    c.add(
        "nvidia.fabricmanager",
        bool(gpu.get("fabricmanager_active")),
        found="nvidia-fabricmanager "
        + ("active" if gpu.get("fabricmanager_active") else "not active"),
        expected="nvidia-fabricmanager active: NVSwitch GPUs stay unusable without it",
        fix="install nvidia-fabricmanager of the driver's version and enable it",
    )


def _clock_check(c: _Checker, facts: Mapping[str, t.Any]) -> None:
    clock = facts.get("clock") or {}
    services = clock.get("services") or []
    synced = clock.get("synchronized")
    found = (
        "kernel clock " + {True: "synchronised", False: "unsynchronised", None: "unknown"}[synced]
    )
    found += "; time service: " + (", ".join(services) or "none")
    c.add(
        "time.sync",
        bool(synced),
        found=found,
        expected="a synchronised clock: JWTs of slurmrestd expire early or late otherwise",
        fix="node_prep enables chrony (node_prep_time_servers names the site's NTP servers)",
    )


def _network_checks(
    c: _Checker, facts: Mapping[str, t.Any], settings: Settings, every_node: list[str]
) -> None:
    resolved = facts.get("resolve") or {}
    unresolved = [name for name in every_node if not resolved.get(name)]
    c.add(
        "dns.nodes",
        not unresolved,
        found="unresolved: " + ", ".join(unresolved)
        if unresolved
        else f"{len(every_node)} names resolve",
        expected="every node's name resolves on every node",
        fix="add the names to the site's DNS (or /etc/hosts on every node)",
    )
    cluster = [
        (n, cidr)
        for n, cidr in (("pod", settings.pod_cidr), ("service", settings.service_cidr))
        if cidr
    ]
    if not cluster:
        c.skip("network.overlap", "node_prep_pod_cidr and node_prep_service_cidr are unset")
        return
    netaddr = require_netaddr()
    clashes = []
    for link in (facts.get("network") or {}).get("links") or []:
        if str(link.get("name", "")).startswith(("cni", "flannel", "cali", "veth", "lo", "kube")):
            continue  # the cluster's own interfaces live in those networks by design
        for address in link.get("addresses") or []:
            host_net = netaddr.IPNetwork(address)
            for what, cidr in cluster:
                if (
                    host_net.cidr in netaddr.IPNetwork(cidr)
                    or netaddr.IPNetwork(cidr) in host_net.cidr
                ):
                    clashes.append(f"{link['name']} {address} in the {what} CIDR {cidr}")
    c.add(
        "network.overlap",
        not clashes,
        found="; ".join(clashes) or "no host network in the pod or service CIDR",
        expected="the host's networks outside the pod and service CIDRs",
        fix="choose pod and service CIDRs (node_prep_pod_cidr, node_prep_service_cidr) outside the host's networks",
    )


def _default_mtu(facts: Mapping[str, t.Any]) -> int | None:
    network = facts.get("network") or {}
    for link in network.get("links") or []:
        if link.get("name") == network.get("default"):
            return int(link["mtu"]) if link.get("mtu") else None
    return None


def _user_and_mounts(c: _Checker, facts: Mapping[str, t.Any], settings: Settings) -> None:
    user = facts.get("slurm_user")
    wanted = f"uid {settings.slurm_uid}, gid {settings.slurm_gid} (as in the Slinky images)"
    c.add(
        "slurm.user",
        user is None or (user["uid"] == settings.slurm_uid and user["gid"] == settings.slurm_gid),
        found="no slurm user" if user is None else f"uid {user['uid']}, gid {user['gid']}",
        expected=f"no slurm user on the host, or {wanted}",
        fix=(
            "give the host's slurm user the images' ids (usermod/groupmod, then chown its files), "
            "or set node_prep_slurm_uid/gid to the ids of the site's images"
        ),
    )
    if not settings.shared_mounts:
        c.skip("mounts.shared", "node_prep_shared_mounts is empty")
        return
    mounts = facts.get("mounts") or {}
    missing = [path for path in settings.shared_mounts if not mounts.get(path)]
    c.add(
        "mounts.shared",
        not missing,
        found="not mounted: " + ", ".join(missing) if missing else "all mounted",
        expected="mounted: " + ", ".join(settings.shared_mounts),
        fix="mount the shared filesystems (fstab or the site's automounter) before lending the node",
    )


def _node_checks(
    c: _Checker,
    node: Mapping[str, t.Any] | None,
    host: HostInput,
    pool: PoolSettings,
    gpu_labels: Mapping[str, str],
) -> None:
    if node is None:
        c.add(
            "node.labels",
            False,
            found=f"no Kubernetes Node named {host.node_name}",
            expected=f"the host's Node ({host.node_name})",
            fix="set slinky_node_name on the host to its Node's name, or join it to the cluster",
        )
        c.skip("node.taints", "no Node")
        return
    labels = (node.get("metadata") or {}).get("labels") or {}
    wanted = {**pool.labels, **(gpu_labels if pool.gpu else {})}
    wrong = {k: v for k, v in wanted.items() if labels.get(k) != str(v)}
    c.add(
        "node.labels",
        not wrong,
        found=", ".join(f"{k}={labels.get(k, '(none)')}" for k in wrong) or "as the pool's",
        expected=", ".join(f"{k}={v}" for k, v in wanted.items()) or "no labels",
        fix=f"node_prep labels the Node: kubectl label node {host.node_name} "
        + " ".join(f"{k}={v}" for k, v in wrong.items()),
    )
    taints = {
        (x.get("key"), x.get("value") or "", x.get("effect"))
        for x in (node.get("spec") or {}).get("taints") or []
    }
    missing = [
        x
        for x in pool.taints
        if (x.get("key"), x.get("value") or "", x.get("effect")) not in taints
    ]
    c.add(
        "node.taints",
        not missing,
        found="missing " + ", ".join(_taint(x) for x in missing) if missing else "as the pool's",
        expected=", ".join(_taint(x) for x in pool.taints) or "no taints",
        fix="node_prep taints the Node (kubernetes.core.k8s_taint)",
    )


def _taint(taint: Mapping[str, t.Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


# --------------------------------------------------------------------------------------
# Every host, and what holds across hosts
# --------------------------------------------------------------------------------------


def site_checks(settings: Settings) -> list[CheckResult]:
    """What the inventory's networks say on their own: no two may overlap."""
    c = _Checker(SITE, settings.waived)
    named = [("pod", settings.pod_cidr), ("service", settings.service_cidr)]
    named += [(f"site {n}", n) for n in settings.site_networks]
    named = [(what, cidr) for what, cidr in named if cidr]
    netaddr = require_netaddr()
    clashes = []
    for index, (what, cidr) in enumerate(named):
        for other, other_cidr in named[index + 1 :]:
            a, b = netaddr.IPNetwork(cidr), netaddr.IPNetwork(other_cidr)
            if a.first <= b.last and b.first <= a.last:
                clashes.append(f"{what} {cidr} overlaps {other} {other_cidr}")
    if len(named) < 2:
        c.skip("network.cidrs", "fewer than two networks in the inventory")
    else:
        c.add(
            "network.cidrs",
            not clashes,
            found="; ".join(clashes) or f"{len(named)} networks apart",
            expected="pod, service and site networks apart",
            fix="change node_prep_pod_cidr or node_prep_service_cidr (the cluster's) so none overlaps",
        )
    return c.results


def evaluate(
    hosts: list[HostInput],
    nodes: list[Mapping[str, t.Any]],
    settings: Settings,
    gpu_labels: Mapping[str, str] | None = None,
) -> list[CheckResult]:
    """Every check on every host, then the checks that compare a pool's hosts."""
    require_netaddr()
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    every_node = sorted({h.node_name for h in hosts})
    results = site_checks(settings)
    mtus: dict[str, Counter[int]] = {}
    for host in hosts:
        mtu = _default_mtu(host.facts)
        if mtu:
            mtus.setdefault(host.pool, Counter())[mtu] += 1
    for host in hosts:
        pool = settings.pools[host.pool]
        c = _Checker(host.name, settings.waived)
        c.add(
            "host.reachable",
            bool(host.facts),
            found="read" if host.facts else "unreachable, or its facts could not be read",
            expected="the host answers over its Ansible connection, with Python",
            fix="see the Read the host task's error for this host",
        )
        if not host.facts:
            results.extend(c.results)
            continue
        kubelet = kubelet_config(host.facts)
        _cgroup_checks(c, host.facts, settings)
        _kernel_checks(c, host.facts, settings)
        _swap_check(c, host.facts, kubelet)
        _runtime_checks(c, host.facts, kubelet, settings, pool)
        _gpu_checks(c, host.facts, settings, pool)
        _clock_check(c, host.facts)
        _network_checks(c, host.facts, settings, every_node)
        _mtu_check(c, host, mtus.get(host.pool, Counter()), settings)
        _user_and_mounts(c, host.facts, settings)
        _shared_mount_types(c, host, hosts, settings)
        _node_checks(c, by_name.get(host.node_name), host, pool, gpu_labels or {})
        results.extend(c.results)
    return results


def _mtu_check(c: _Checker, host: HostInput, pool_mtus: Counter[int], settings: Settings) -> None:
    mtu = _default_mtu(host.facts)
    ranked = pool_mtus.most_common()
    if settings.mtu:
        wanted, source = settings.mtu, "node_prep_mtu"
    elif len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        wanted, source = (
            0,
            f"one MTU across pool {host.pool}, which has "
            + ", ".join(str(mtu) for mtu, _count in ranked),
        )
    else:
        wanted, source = (ranked[0][0] if ranked else 0), f"the rest of pool {host.pool}"
    link = (host.facts.get("network") or {}).get("default")
    c.add(
        "network.mtu",
        mtu is not None and mtu == wanted,
        found=f"MTU {mtu} on {link}" if mtu else "no default route",
        expected=f"MTU {wanted}, as {source}" if wanted else source,
        fix=(
            "give every node of the pool the same MTU (the site's network configuration; "
            "a mismatch drops large packets between pods)"
        ),
    )


def _shared_mount_types(
    c: _Checker, host: HostInput, hosts: list[HostInput], settings: Settings
) -> None:
    if not settings.shared_mounts:
        return
    differs = []
    for path in settings.shared_mounts:
        mine = ((host.facts.get("mounts") or {}).get(path) or {}).get("fstype")
        kinds = Counter(
            ((h.facts.get("mounts") or {}).get(path) or {}).get("fstype") for h in hosts
        )
        kinds.pop(None, None)
        if mine and kinds and mine != kinds.most_common(1)[0][0]:
            differs.append(f"{path} is {mine}, {kinds.most_common(1)[0][0]} elsewhere")
    c.add(
        "mounts.same_type",
        not differs,
        found="; ".join(differs) or "as on the other nodes",
        expected="each shared path the same filesystem on every node",
        fix="mount the same shared filesystem on every node (a local directory there hides the shared one)",
        severity=WARN,
    )
