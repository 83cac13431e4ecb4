# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Values of the Slinky ``slurm`` chart from a site's node pools (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

The role ``hpcops.slinky.slurm_cluster`` gathers the Kubernetes Nodes and hands them with
its settings to :func:`build_values`, which returns the chart values or raises
:class:`ConfigError` naming the role variable at fault and the fix.  Nothing here talks to
Kubernetes or Slurm, so the same settings always give the same values.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.merge import merged, plain
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_release import (
    ReleaseError,
    release_line,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
    BRIDGE_KIND,
    bridge_pool,
    check_bridge_cluster,
    external_conf,
    hybrid_tolerations,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_login import (
    NSSWITCH_FILE,
    add_directory,
    away_from_pools,
    directory_conf,
    directory_names,
    directory_settings,
    login_set_values,
    nsswitch_conf,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.quantity import quantity

# Slurm names: NodeSet and partition names become slurm.conf words and Kubernetes names.
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
GRES_TYPE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SLURM_TIME_RE = re.compile(
    r"^(UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}(:\d{2})?)?)$"
)

POOL_KINDS = ("dedicated", "lendable", BRIDGE_KIND)
# What the handover does, at a reclaim's deadline, to the jobs still on a lent node: the
# handover's ESCALATIONS (_handover/model.py; a unit test keeps them alike, since _deploy
# imports nothing of the handover's).
REQUEUE, CANCEL, WAIT = "requeue", "cancel", "wait"
ESCALATIONS = (REQUEUE, CANCEL, WAIT)
# The backfill partition's MaxTime where the site gives none and jobs are requeued.
BACKFILL_MAX_TIME = "4:00:00"
BACKFILL_MAX_TIME_VAR = "slurm_cluster_backfill.max_time"
# The handover's default_grace_s when the site's handover_policy gives none.
HANDOVER_DEFAULT_GRACE_S = 300
SCALING_MODES = ("StatefulSet", "DaemonSet")
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"

# slurm.conf's mutually exclusive defaults of a job's memory (a site's own one wins).
MEMORY_DEFAULTS = frozenset({"DefMemPerCPU", "DefMemPerNode", "DefMemPerGPU"})

MCS_PLUGINS = ("none", "account", "group", "user", "label")
MCS_PARAMETERS = ("ondemand", "noselect", "select", "ondemandselect", "enforced", "privatedata")

# cgroup.conf keys each Slurm release accepts (an unknown key is fatal to slurmd).
# From the cgroup.conf man pages: CgroupAutomount, CgroupReleaseAgentDir, ConstrainKmemSpace,
# MaxKmemPercent, MinKmemSpace and TaskAffinity are gone since 23.02; 24.11 added
# EnableExtraControllers; 25.05 added EnableControllers; 26.05 keeps them.
_CGROUP_KEYS_COMMON = frozenset(
    {
        "CgroupMountpoint",
        "CgroupPlugin",
        "ConstrainCores",
        "ConstrainDevices",
        "ConstrainRAMSpace",
        "ConstrainSwapSpace",
        "AllowedRAMSpace",
        "AllowedSwapSpace",
        "MaxRAMPercent",
        "MaxSwapPercent",
        "MemorySwappiness",
        "MinRAMSpace",
        "IgnoreSystemd",
        "IgnoreSystemdOnFailure",
        "SystemdTimeout",
        "SignalChildrenProcesses",
        "EnableControllers",
    }
)
CGROUP_KEYS = {
    (24, 11): _CGROUP_KEYS_COMMON | {"EnableExtraControllers"},
    (25, 5): _CGROUP_KEYS_COMMON | {"EnableExtraControllers"},
    (25, 11): _CGROUP_KEYS_COMMON | {"EnableExtraControllers"},
    (26, 5): _CGROUP_KEYS_COMMON | {"EnableExtraControllers"},
}


@dataclass(frozen=True)
class ChartLine:
    """What the slurm chart and operator of one Slinky line need from the values.

    The one place that decides per chart version, as CGROUP_KEYS does per Slurm release.
    """

    name: str
    # Fields every NodeSet must carry: the 1.1 chart has no nodesetDefaults, and a NodeSet
    # without them does not render. 1.2 fills them from nodesetDefaults.
    nodeset_base: Mapping[str, t.Any]
    # NodeSet keys (dotted) the line's chart and CRD do not know, and what to do instead.
    unknown_nodeset_keys: Mapping[str, str]
    # Whether the operator still writes slurm.conf's scheduling, cgroup and logging settings
    # and gres.conf (1.1), or left them to Slurm's defaults (1.2: "pruned default slurm.conf").
    operator_writes_defaults: bool
    inplace_reconfigure: bool
    # Objects the chart enables unless told not to (1.1's default NodeSet and login set).
    chart_defaults_off: Mapping[str, t.Any]
    # The operator's own preStop hook of the slurmd container (workerbuilder), which
    # lendable NodeSets run unless the handover's reclaim drained the node
    # (slurm_cluster_prestop_leaves_reclaims).
    slurmd_prestop: str


_NODESET_FIELDS_1_1: dict[str, t.Any] = {
    "scalingMode": "StatefulSet",
    "replicas": 0,
    # 1.1.1 forces it off; a namespace user could taint any node (removed in 1.2).
    "taintKubeNodes": False,
    "workloadDisruptionProtection": True,
    "ordinalPadding": 0,
    "slurmd": {"args": [], "env": [], "resources": {}, "volumeMounts": []},
    "logfile": {"resources": {}},
    "extraConf": None,
    "partition": {"enabled": False},
    "ssh": {"enabled": False},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
    "metadata": {},
    "podSpec": {
        "resources": {},
        "initContainers": [],
        "affinity": {},
        "tolerations": [],
        "volumes": [],
    },
}
_NEEDS_1_2 = "needs Slinky 1.2 (slinky_version 1.2.x); remove it on 1.1"
CHART_LINES = {
    (1, 1): ChartLine(
        name="1.1",
        nodeset_base=_NODESET_FIELDS_1_1,
        unknown_nodeset_keys={
            "pinToNode": _NEEDS_1_2,
            "pruneSlurmNodeRecords": _NEEDS_1_2,
            "oversubscribeNode": _NEEDS_1_2,
            "updateStrategy.scheduledUpdate": _NEEDS_1_2,
        },
        operator_writes_defaults=True,
        inplace_reconfigure=False,
        chart_defaults_off={
            "nodesets": {"slinky": {"enabled": False}},
            "loginsets": {"slinky": {"enabled": False}},
            "partitions": {"all": {"enabled": False}},
        },
        slurmd_prestop=(
            "scontrol update nodename=$(hostname) state=down reason='Pod is terminating' && "
            "scontrol delete nodename=$(hostname);"
        ),
    ),
    (1, 2): ChartLine(
        name="1.2",
        nodeset_base={},
        unknown_nodeset_keys={
            "taintKubeNodes": (
                "was removed in Slinky 1.2 (a namespace user could taint any node); remove "
                "it: the handover protocol taints lent nodes itself"
            ),
        },
        operator_writes_defaults=False,
        inplace_reconfigure=True,
        chart_defaults_off={},
        slurmd_prestop=(
            "scontrol update nodename=$(hostname) state=down "
            "reason='slurm-operator: Pod is terminating';"
        ),
    ),
}


def restated_slurm_conf(cgroups: bool, accounting: bool) -> dict[str, str]:
    """What the 1.1 operator wrote into slurm.conf and 1.2 leaves to Slurm's defaults.

    Restated so a job is confined and accounted alike on both lines. TaskPlugin is in the
    order slurm.conf(5) of 24.11 to 26.05 recommends (1.1 wrote task/affinity first).
    """
    conf = {
        "ReturnToService": "2",
        "GresTypes": "gpu",
        "LogTimeFormat": "iso8601,format_stderr",
        "CommunicationParameters": "block_null_hash",
        "SelectTypeParameters": "CR_Core_Memory",
    }
    if cgroups:
        conf |= {
            # The operator merges its own SlurmctldParameters (enable_configless, ...) in.
            "SlurmctldParameters": "enable_stepmgr",
            "ProctrackType": "proctrack/cgroup",
            "PrologFlags": "Contain",
            "TaskPlugin": "task/cgroup,task/affinity",
            "JobAcctGatherType": "jobacct_gather/cgroup",
        }
    else:
        conf |= {
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/affinity",
            "JobAcctGatherType": "jobacct_gather/linux",
        }
    if accounting:
        conf["AccountingStorageTRES"] = "gres/gpu"
    return conf


# With slurmdbd: association and QoS limits enforced (a job of a user without an
# association is refused, `safe`: none starts that a GrpTRESMins limit would kill), and
# fair share weighing in the priority (its weight is 0 unless set). Site settings
# (slurm_cluster_slurm_conf) win.
ACCOUNTING_POLICY = {
    "AccountingStorageEnforce": "associations,limits,qos,safe",
    "PriorityType": "priority/multifactor",
    "PriorityWeightFairshare": "10000",
    "PriorityWeightAge": "1000",
}


@dataclass(frozen=True)
class Node:
    """What the builder needs of a Kubernetes Node."""

    name: str
    labels: Mapping[str, str]
    gpus: int
    # Allocatable CPUs and memory: what a pod, and so slurmd's jobs, may use of the node.
    cpus: int = 0
    memory_mib: int = 0

    @classmethod
    def from_k8s(cls, obj: Mapping[str, t.Any]) -> Node:
        meta = obj.get("metadata", {})
        allocatable = obj.get("status", {}).get("allocatable", {}) or {}
        labels = dict(meta.get("labels") or {})
        try:
            gpus = int(allocatable.get(GPU_RESOURCE) or labels.get(GPU_COUNT_LABEL) or 0)
        except (TypeError, ValueError):
            gpus = 0
        return cls(
            name=str(meta.get("name", "")),
            labels=labels,
            gpus=gpus,
            cpus=quantity(allocatable.get("cpu"), 1e-3) // 1000,
            memory_mib=whole_mib(allocatable.get("memory")),
        )

    def matches(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(key) == value for key, value in selector.items())


def slurm_release(version: str, variable: str) -> tuple[int, int]:
    """'26.05' or '26.05.5' -> (26, 5); ConfigError otherwise."""
    match = re.match(r"^(\d{2})\.(\d{2})(\.\d+)?$", str(version))
    if not match:
        raise ConfigError(
            variable,
            f"{version!r} is not a Slurm release",
            "write it as YY.MM, for example '26.05'",
        )
    return int(match.group(1)), int(match.group(2))


def chart_line(version: str, variable: str) -> ChartLine:
    """The Slinky line of a slurm chart version; ConfigError for one this role cannot build."""
    try:
        return CHART_LINES[release_line(version, variable).minor]
    except ReleaseError as err:
        raise ConfigError(variable, err.problem, err.fix) from None


def gres_type(product: str, names: Mapping[str, str]) -> str:
    """The Slurm GRES type of a GPU product label: the site's name for it, or a short form.

    'NVIDIA-A100-SXM4-80GB' -> 'a100', 'Tesla-V100-SXM2-16GB' -> 'v100'.
    """
    if product in names:
        return names[product]
    words = [w for w in re.split(r"[-_ ]+", product) if w]
    while words and words[0].lower() in ("nvidia", "tesla", "geforce", "quadro"):
        words = words[1:]
    return (words[0] if words else product).lower()


def _mapping(value: t.Any, variable: str) -> Mapping[str, t.Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            variable,
            f"expected a mapping, got {type(value).__name__}",
            "write it as key: value pairs",
        )
    return value


@dataclass(frozen=True)
class NodeSetPlan:
    name: str
    pool: str
    scaling_mode: str
    node_selector: dict[str, str]
    nodes: tuple[str, ...]
    gres: str | None
    exclude_gpu_products: tuple[str, ...] = ()
    # DefMemPerCPU of its partitions: without it a job that gives no --mem takes all of a
    # node's memory (CR_Core_Memory), so one job runs per node whatever its cores. 0: none.
    mem_per_cpu_mib: int = 0


def _pool_members(
    pool_name: str, pool: Mapping[str, t.Any], nodes: Sequence[Node], lent_label: str
) -> tuple[dict[str, str], str, list[Node]]:
    """The NodeSet selector, scaling mode and Kubernetes nodes of one pool."""
    var = f"slurm_cluster_pools.{pool_name}"
    if not NAME_RE.match(pool_name):
        raise ConfigError(
            var,
            "is not a valid pool name",
            "use lower-case letters, digits and '-', starting with a letter, at most 40 characters",
        )
    kind = pool.get("kind", "dedicated")
    if kind not in POOL_KINDS:
        raise ConfigError(
            f"{var}.kind", f"unknown kind {kind!r}", f"use one of {', '.join(POOL_KINDS)}"
        )
    raw_selector = _mapping(pool.get("node_selector"), f"{var}.node_selector")
    if not raw_selector:
        raise ConfigError(
            f"{var}.node_selector",
            "is empty",
            "give the labels that select the pool's nodes, for example {hpcops.io/pool: interactive}",
        )
    selector = {str(k): str(v) for k, v in raw_selector.items()}
    members = sorted((n for n in nodes if n.matches(selector)), key=lambda n: n.name)
    if not members:
        raise ConfigError(
            f"{var}.node_selector",
            f"selects no Kubernetes node ({selector})",
            "label the pool's nodes or fix the selector",
        )
    if kind == "lendable":
        if pool.get("scaling_mode", "DaemonSet") != "DaemonSet":
            raise ConfigError(
                f"{var}.scaling_mode",
                "a lendable pool is always a DaemonSet NodeSet",
                "remove scaling_mode or set it to DaemonSet",
            )
        # The handover protocol labels lent nodes; the NodeSet follows the label.
        return {**selector, lent_label: "true"}, "DaemonSet", members
    if kind == BRIDGE_KIND:
        # slurmd on every node of the pool, which is the Slurm node the bridge maps it to.
        return selector, "DaemonSet", members
    mode = pool.get("scaling_mode", "StatefulSet")
    if mode not in SCALING_MODES:
        raise ConfigError(
            f"{var}.scaling_mode",
            f"unknown scaling mode {mode!r}",
            f"use one of {', '.join(SCALING_MODES)}",
        )
    return selector, str(mode), members


def whole_mib(memory: t.Any) -> int:
    """A memory quantity in whole MiB, rounded down as slurmd counts its RealMemory: rounded
    to the nearest (24684092Ki: 24106 rather than 24105), DefMemPerCPU times the node's CPUs
    came to 1 MiB more than the node has, and Slurm refused every whole-node job that gave no
    --mem ("Requested node configuration is not available")."""
    return quantity(memory) // 2**20


def default_mem_per_cpu(pool_name: str, pool: Mapping[str, t.Any], nodes: Sequence[Node]) -> int:
    """A pool's default memory per CPU (MiB): its own setting, or what its smallest node has.

    From the slurmd container's limits when the pool sets both, else the Nodes' allocatable
    memory and CPUs, rounded down so a job on every CPU still fits the node.
    """
    var = f"slurm_cluster_pools.{pool_name}.default_mem_per_cpu_mib"
    if "default_mem_per_cpu_mib" in pool:
        return _count(
            pool["default_mem_per_cpu_mib"],
            var,
            0,
            2**31,
            "give MiB per CPU a job gets without --mem, or 0 to leave Slurm's default (the whole node)",
        )
    values = _mapping(pool.get("values"), f"slurm_cluster_pools.{pool_name}.values")
    limits = _mapping(
        _mapping(_mapping(values.get("slurmd"), var).get("resources"), var).get("limits"), var
    )
    if limits.get("cpu") and limits.get("memory"):
        cpus = quantity(limits["cpu"], 1e-3) // 1000
        memory = whole_mib(limits["memory"])
        return memory // cpus if cpus > 0 else 0
    per_node = [n.memory_mib // n.cpus for n in nodes if n.cpus > 0 and n.memory_mib > 0]
    return min(per_node, default=0)


def _check_one_pool(node: str, first: str, pool: str, pools: Mapping[str, t.Any]) -> None:
    """A node belongs to one pool: one owner, one NodeSet, one partition."""
    if first == pool:
        return
    kinds = {pools[first].get("kind", "dedicated"), pools[pool].get("kind", "dedicated")}
    why = (
        "the handover would lend it to Slurm while slurm-bridge schedules pods there"
        if kinds == {"lendable", BRIDGE_KIND}
        else "it would get a slurmd (and a Slurm node) of each"
    )
    raise ConfigError(
        f"slurm_cluster_pools.{pool}.node_selector",
        f"selects node {node}, which pool {first} selects too: {why}",
        "give each pool node_selector labels no other pool's nodes have",
    )


def plan_nodesets(
    pools: Mapping[str, t.Any],
    nodes: Sequence[Node],
    gpu_type_names: Mapping[str, str],
    lent_label: str,
) -> list[NodeSetPlan]:
    """One NodeSet per pool, or per GPU product where a pool mixes products."""
    if not pools:
        raise ConfigError(
            "slurm_cluster_pools", "no pool is defined", "describe at least one node pool"
        )
    plans: list[NodeSetPlan] = []
    bridge = bridge_pool(pools)
    pool_of: dict[str, str] = {}
    for pool_name, raw in sorted(pools.items()):
        var = f"slurm_cluster_pools.{pool_name}"
        pool = _mapping(raw, var)
        selector, mode, members = _pool_members(str(pool_name), pool, nodes, lent_label)
        for node in members:
            _check_one_pool(node.name, pool_of.setdefault(node.name, pool_name), pool_name, pools)
        if bridge is not None and bridge.name == pool_name and bridge.mode == "external":
            continue  # no slurmd: the bridge registers these nodes in Slurm itself
        by_product: dict[str | None, list[Node]] = {}
        for node in members:
            product = node.labels.get(GPU_PRODUCT_LABEL) if node.gpus > 0 else None
            by_product.setdefault(product, []).append(node)
        products = sorted(p for p in by_product if p is not None)
        for product, group in sorted(by_product.items(), key=lambda item: item[0] or ""):
            if product is None:
                plans.append(
                    NodeSetPlan(
                        pool_name,
                        pool_name,
                        mode,
                        selector,
                        tuple(n.name for n in group),
                        None,
                        tuple(products),
                        default_mem_per_cpu(pool_name, pool, group),
                    )
                )
                continue
            gtype = gres_type(product, gpu_type_names)
            if not GRES_TYPE_RE.match(gtype):
                raise ConfigError(
                    "slurm_cluster_gpu_type_names",
                    f"GRES type {gtype!r} for {product!r} is not a valid Slurm name",
                    "map the product to letters, digits, '_', '.' or '-'",
                )
            counts = sorted({n.gpus for n in group})
            if len(counts) != 1:
                raise ConfigError(
                    f"{var}.node_selector",
                    f"nodes with {product} have different GPU counts {counts}",
                    "split them into pools of equal nodes",
                )
            name = (
                pool_name
                if len(by_product) == 1
                else f"{pool_name}-{re.sub('[^a-z0-9-]', '-', gtype.lower())}"
            )
            plans.append(
                NodeSetPlan(
                    name,
                    pool_name,
                    mode,
                    {**selector, GPU_PRODUCT_LABEL: product},
                    tuple(n.name for n in group),
                    f"gpu:{gtype}:{counts[0]}",
                    mem_per_cpu_mib=default_mem_per_cpu(pool_name, pool, group),
                )
            )
    names = [p.name for p in plans]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(
            "slurm_cluster_pools",
            f"NodeSet names {duplicates} collide",
            "rename the pools so each NodeSet name is unique",
        )
    return plans


def cgroup_conf(settings: Mapping[str, t.Any], release: tuple[int, int]) -> str:
    """cgroup.conf that constrains each job, with only the keys `release` accepts."""
    var = "slurm_cluster_cgroup"
    known = CGROUP_KEYS.get(release)
    if known is None:
        supported = ", ".join(f"{y}.{m:02d}" for y, m in sorted(CGROUP_KEYS))
        raise ConfigError(
            "slurm_cluster_slurm_version",
            f"no cgroup.conf key list for Slurm {release[0]}.{release[1]:02d}",
            f"use one of {supported}",
        )
    conf: dict[str, t.Any] = {}
    for key, raw in _mapping(settings, var).items():
        if key not in known:
            raise ConfigError(
                f"{var}.{key}",
                f"is not a cgroup.conf key of Slurm {release[0]}.{release[1]:02d} (slurmd refuses to start on unknown keys)",
                f"use one of {', '.join(sorted(known))}",
            )
        conf[key] = ("yes" if raw else "no") if isinstance(raw, bool) else raw
    return "".join(f"{key}={value}\n" for key, value in conf.items())


# Where slurmdbd keeps its records: the slurm chart's accounting.storageConfig defaults,
# which are also the names of the MariaDB Slinky's installation guide makes.
ACCOUNTING_DATABASE_DEFAULTS: dict[str, t.Any] = {
    "host": "mariadb",
    "port": 3306,
    "database": "slurm_acct_db",
    "user": "slurm",
    "password_secret": {"name": "mariadb-password", "key": "password"},
}
DATABASE_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def accounting_storage(database: t.Any) -> dict[str, t.Any]:
    """The chart's accounting.storageConfig from slurm_cluster_accounting_database; the
    password stays in its Secret (only the reference goes into the values)."""
    var = "slurm_cluster_accounting_database"
    given = dict(_mapping(database, var))
    unknown = sorted(set(given) - set(ACCOUNTING_DATABASE_DEFAULTS))
    if unknown:
        raise ConfigError(
            f"{var}.{unknown[0]}",
            "is not a setting of the accounting database",
            f"use some of {', '.join(ACCOUNTING_DATABASE_DEFAULTS)}",
        )
    merged = {**ACCOUNTING_DATABASE_DEFAULTS, **given}
    host = str(merged["host"] or "").strip()
    if not host:
        raise ConfigError(f"{var}.host", "is empty", "name the database's host or Service")
    port = merged["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{var}.port", f"{port!r} is not a TCP port", "give 1 to 65535")
    for key in ("database", "user"):
        if not DATABASE_NAME_RE.match(str(merged[key] or "")):
            raise ConfigError(
                f"{var}.{key}",
                f"{merged[key]!r} is not a MariaDB name slurmdbd can use",
                "use letters, digits and _ (at most 64)",
            )
    secret = {
        **ACCOUNTING_DATABASE_DEFAULTS["password_secret"],
        **_mapping(merged["password_secret"], f"{var}.password_secret"),
    }
    if not secret.get("name") or not secret.get("key"):
        raise ConfigError(
            f"{var}.password_secret",
            "needs a name and a key",
            "point it at the Secret that holds the database user's password",
        )
    return {
        "host": host,
        "port": port,
        "database": merged["database"],
        "username": merged["user"],
        "passwordKeyRef": {"name": str(secret["name"]), "key": str(secret["key"])},
    }


def mcs_settings(mcs: str, accounting: bool, release: tuple[int, int]) -> dict[str, str]:
    """MCSPlugin and MCSParameters from one setting such as 'label:enforced,select'."""
    var = "slurm_cluster_mcs"
    plugin, _colon, params = str(mcs).partition(":")
    plugin = plugin.strip().removeprefix("mcs/")
    if plugin not in MCS_PLUGINS:
        raise ConfigError(
            var,
            f"unknown MCS plugin {plugin!r}",
            f"use one of {', '.join(MCS_PLUGINS)}, optionally followed by ':' and parameters, for example 'label:enforced,select'",
        )
    if plugin == "none":
        if params:
            raise ConfigError(var, "'none' takes no parameters", "write 'none' or choose a plugin")
        return {}
    if plugin == "account" and not accounting:
        raise ConfigError(
            var,
            "mcs/account needs Slurm accounting (slurmdbd), which is disabled",
            "enable slurm_cluster_accounting or choose mcs 'label', 'group' or 'user'",
        )
    if plugin == "label" and release < (24, 11):
        raise ConfigError(
            var,
            "mcs/label needs Slurm 24.11 or newer",
            "upgrade Slurm or choose mcs 'group' or 'user'",
        )
    words = (
        [w.strip() for w in params.split(",") if w.strip()] if params else ["enforced", "select"]
    )
    unknown = [w for w in words if w not in MCS_PARAMETERS]
    if unknown:
        raise ConfigError(
            var, f"unknown MCS parameters {unknown}", f"use {', '.join(MCS_PARAMETERS)}"
        )
    selects = [w for w in words if w in ("select", "noselect", "ondemandselect")]
    if len(selects) > 1 or ("ondemand" in words and "enforced" in words):
        raise ConfigError(
            var,
            f"parameters {words} contradict each other",
            "keep one of select/noselect/ondemandselect and one of ondemand/enforced",
        )
    return {"MCSPlugin": f"mcs/{plugin}", "MCSParameters": ",".join(words)}


def _partition_config(value: t.Any, variable: str) -> dict[str, t.Any]:
    config = dict(_mapping(value, variable))
    for key in ("MaxTime", "DefaultTime"):
        if key in config and not SLURM_TIME_RE.match(str(config[key])):
            raise ConfigError(
                f"{variable}.{key}",
                f"{config[key]!r} is not a Slurm time",
                "write minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED",
            )
    return config


def slurm_time_minutes(text: str) -> int:
    """The minutes of a finite Slurm time, as slurmctld counts them (seconds rounded up).

    Slurm's forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
    days-hours:minutes and days-hours:minutes:seconds.
    """
    days, dash, rest = str(text).partition("-")
    if not dash:
        days, rest = "0", days
    parts = [int(part) for part in rest.split(":")]
    if dash:
        hours, minutes, seconds = (*parts, 0, 0)[:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, (*parts, 0)[:2]
    total_s = ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_s // 60)


def slurm_time(minutes: int) -> str:
    """A Slurm time of whole minutes, written as the role writes MaxTime ('4:00:00')."""
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:00"
    return f"{hours}:{minutes:02d}:00"


def _seconds(value: t.Any, variable: str) -> int:
    """Whole seconds >= 0; a template gives them as a string ("300")."""
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            variable, f"{value!r} is not a number of seconds >= 0", "give seconds, for example 300"
        )
    return value


def _escalation(value: t.Any, variable: str) -> str:
    if isinstance(value, str) and value in ESCALATIONS:
        return value
    raise ConfigError(
        variable, f"{value!r} is not a known escalation", f"use one of {', '.join(ESCALATIONS)}"
    )


def backfill_escalation(policy: t.Any, grace_s: int) -> tuple[str, str]:
    """What a reclaim does to backfill's jobs still there after the grace, and the variable
    that says so; ConfigError where the handover's grace of backfill is not grace_s, the
    partition's GraceTime (slurm_cluster_backfill.grace_time_s).

    Read as the handover role reads its policy: its handover_policy_defaults combined key by
    key with the site's handover_policy. The defaults name backfill with grace_time_s and
    requeue; a site's `partitions` replaces them whole, and there a partition it leaves out,
    or a field one leaves out, takes default_grace_s and default_escalation.
    """
    policy = _mapping(policy, "handover_policy")
    default_var = "handover_policy.default_escalation"
    default = _escalation(policy.get("default_escalation", REQUEUE), default_var)
    if "partitions" not in policy:
        return REQUEUE, "handover_policy.partitions.backfill.escalation"
    var = "handover_policy.partitions.backfill"
    partitions = _mapping(policy["partitions"], "handover_policy.partitions")
    entry = _mapping(partitions.get("backfill"), var)
    grace_var = "slurm_cluster_backfill.grace_time_s"
    equal = f'make them equal, for example grace_s: "{{{{ {grace_var} }}}}"'
    if "grace_s" in entry:
        grace = _seconds(entry["grace_s"], f"{var}.grace_s")
        if grace != grace_s:
            raise ConfigError(
                f"{var}.grace_s",
                f"{grace} s is not {grace_var} ({grace_s} s), the backfill partition's "
                "GraceTime: the handover would give its jobs another grace than Slurm does",
                f"{equal}; leaving grace_s out gives backfill handover_policy.default_grace_s",
            )
    else:
        grace = _seconds(
            policy.get("default_grace_s", HANDOVER_DEFAULT_GRACE_S),
            "handover_policy.default_grace_s",
        )
        if grace != grace_s:
            raise ConfigError(
                f"{var}.grace_s",
                f"is not given, so the handover gives backfill's jobs "
                f"handover_policy.default_grace_s ({grace} s), not {grace_var} ({grace_s} s), "
                "the partition's GraceTime",
                equal,
            )
    if "escalation" in entry:
        return _escalation(entry["escalation"], f"{var}.escalation"), f"{var}.escalation"
    return default, default_var


def _grace_minutes(grace_s: int) -> int:
    """The grace as a MaxTime: whole minutes, rounded up (as slurmctld rounds), at least 1."""
    return max(1, -(-grace_s // 60))


def _check_fits_grace(
    max_time: str, var: str, grace_s: int, escalation: str, escalation_var: str
) -> None:
    """Where a reclaim cancels or waits for backfill's jobs, they must fit its grace."""
    if escalation == REQUEUE:
        return
    limit = _grace_minutes(grace_s)
    if max_time not in ("UNLIMITED", "INFINITE") and slurm_time_minutes(max_time) <= limit:
        return
    fate = (
        "be cancelled"
        if escalation == CANCEL
        else "hold their node past its grace (the reclaim waits for them)"
    )
    raise ConfigError(
        var,
        f"{max_time!r} is longer than the grace of a reclaim ({grace_s} s) and "
        f"{escalation_var} is {escalation}: at every reclaim, jobs longer than the grace "
        f"would {fate}",
        f"shorten {var.rpartition('.')[2]} to at most {slurm_time(limit)}"
        + (" (or leave it out: the grace is the default)" if var == BACKFILL_MAX_TIME_VAR else "")
        + f", or use escalation {REQUEUE}, which requeues them",
    )


def _backfill_max_time(
    backfill: Mapping[str, t.Any], grace_s: int, escalation: str, escalation_var: str
) -> str:
    """backfill's MaxTime: the site's, or 4 hours, where a reclaim requeues its jobs; where
    it cancels or waits for them, at most the grace (else each reclaim loses them, or they
    hold the node past its grace), and the grace by default."""
    var = BACKFILL_MAX_TIME_VAR
    if escalation != REQUEUE and "max_time" not in backfill:
        return slurm_time(_grace_minutes(grace_s))
    max_time = str(backfill.get("max_time", BACKFILL_MAX_TIME))
    if not SLURM_TIME_RE.match(max_time) or max_time in ("UNLIMITED", "INFINITE"):
        raise ConfigError(
            var,
            f"{max_time!r} is not a finite Slurm time",
            "lent nodes come back: give a limit such as '4:00:00'",
        )
    _check_fits_grace(max_time, var, grace_s, escalation, escalation_var)
    return max_time


def _bridge_partition_config(name: str, pools: Mapping[str, t.Any]) -> dict[str, t.Any]:
    return _partition_config(
        pools[name].get("partition_config"), f"slurm_cluster_pools.{name}.partition_config"
    )


def _bridge_partition(
    settings: Mapping[str, t.Any],
    plans: Sequence[NodeSetPlan],
    pools: Mapping[str, t.Any],
    taken: set[str],
) -> dict[str, dict[str, t.Any]]:
    """The bridge's partition over its hybrid NodeSets (external nodes: see _bridge_conf)."""
    bridge = bridge_pool(pools)
    if bridge is None:
        return {}
    site_partitions = _mapping(settings.get("partitions"), "slurm_cluster_partitions")
    if bridge.partition in {*taken, *site_partitions}:
        raise ConfigError(
            f"slurm_cluster_pools.{bridge.name}.partition",
            f"{bridge.partition!r} is a partition of the role's or of slurm_cluster_partitions",
            "give the bridge's partition a name of its own (default slurm-bridge)",
        )
    bridged = sorted({p.name for p in plans if p.pool == bridge.name})
    if not bridged:
        return {}
    config = {"State": "UP", **_bridge_partition_config(bridge.name, pools)}
    return {bridge.partition: {"nodesets": bridged, "configMap": config}}


def _bridge_conf(
    settings: Mapping[str, t.Any], pools: Mapping[str, t.Any], release: tuple[int, int]
) -> dict[str, str]:
    """What the bridge asks of slurmctld, checked; an external pool's NodeSet and partition."""
    bridge = bridge_pool(pools)
    if bridge is None:
        return {}
    mcs_plugin = str(settings.get("mcs", "none")).partition(":")[0].strip()
    check_bridge_cluster(bridge, release, mcs_plugin.removeprefix("mcs/"))
    if bridge.mode != "external":
        return {}
    return external_conf(bridge, {"State": "UP", **_bridge_partition_config(bridge.name, pools)})


def plan_partitions(
    settings: Mapping[str, t.Any], plans: Sequence[NodeSetPlan], pools: Mapping[str, t.Any]
) -> dict[str, dict[str, t.Any]]:
    """batch over the dedicated pools, backfill over the lendable ones, then the site's own."""
    dedicated = sorted(
        {p.name for p in plans if pools[p.pool].get("kind", "dedicated") == "dedicated"}
    )
    lendable = sorted({p.name for p in plans if pools[p.pool].get("kind") == "lendable"})
    partitions: dict[str, dict[str, t.Any]] = {}
    # What a reclaim does to backfill's jobs after the grace (requeue unless lendable pools).
    grace, escalation, escalation_var = 0, REQUEUE, ""
    batch = _mapping(settings.get("batch"), "slurm_cluster_batch")
    batch_tier = _count(
        batch.get("priority_tier", 10),
        "slurm_cluster_batch.priority_tier",
        0,
        65533,
        "for example 10",
    )
    if dedicated:
        partitions["batch"] = {
            "nodesets": dedicated,
            "configMap": {
                "State": "UP",
                "Default": "YES",
                "MaxTime": "UNLIMITED",
                "PriorityTier": batch_tier,
                # Jobs on dedicated nodes are never preempted for anything.
                "PreemptMode": "OFF",
            },
        }
    if lendable:
        backfill = _mapping(settings.get("backfill"), "slurm_cluster_backfill")
        grace = backfill.get("grace_time_s", 300)
        if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
            raise ConfigError(
                "slurm_cluster_backfill.grace_time_s",
                f"{grace!r} is not a number of seconds >= 0",
                "give the seconds a job may run after it is told to leave, for example 300",
            )
        escalation, escalation_var = backfill_escalation(settings.get("handover_policy"), grace)
        max_time = _backfill_max_time(backfill, grace, escalation, escalation_var)
        tier = _count(
            backfill.get("priority_tier", 1),
            "slurm_cluster_backfill.priority_tier",
            0,
            65533,
            "for example 1",
        )
        if dedicated and tier >= batch_tier:
            # Equal tiers would let backfill jobs hold nodes that batch jobs wait for.
            raise ConfigError(
                "slurm_cluster_backfill.priority_tier",
                f"{tier} is not below slurm_cluster_batch.priority_tier ({batch_tier})",
                "give the backfill partition the lower tier, for example 1",
            )
        partitions["backfill"] = {
            "nodesets": lendable,
            "configMap": {
                "State": "UP",
                "PriorityTier": tier,
                "PreemptMode": "REQUEUE",
                "MaxTime": max_time,
                "GraceTime": grace,
            },
        }
    partitions |= _bridge_partition(settings, plans, pools, set(partitions))
    by_pool: dict[str, list[str]] = {}
    for plan in plans:
        by_pool.setdefault(plan.pool, []).append(plan.name)
    for name, raw in sorted(
        _mapping(settings.get("partitions"), "slurm_cluster_partitions").items()
    ):
        var = f"slurm_cluster_partitions.{name}"
        if not NAME_RE.match(str(name)):
            raise ConfigError(
                var, "is not a valid partition name", "use lower-case letters, digits and '-'"
            )
        part = _mapping(raw, var)
        wanted = part.get("pools")
        if not wanted or isinstance(wanted, (str, Mapping)):
            raise ConfigError(
                f"{var}.pools",
                "must be a non-empty list of pool names",
                f"name pools from slurm_cluster_pools: {', '.join(sorted(pools))}",
            )
        missing = [p for p in wanted if p not in pools]
        if missing:
            raise ConfigError(
                f"{var}.pools",
                f"names pools that do not exist: {missing}",
                f"use pools from slurm_cluster_pools: {', '.join(sorted(pools))}",
            )
        config = _partition_config(part.get("config"), f"{var}.config")
        if name == "backfill" and "MaxTime" in config:
            # The site's own MaxTime of backfill must fit the grace as much as max_time.
            _check_fits_grace(
                str(config["MaxTime"]), f"{var}.config.MaxTime", grace, escalation, escalation_var
            )
        base = partitions.get(name, {}).get("configMap", {})
        partitions[name] = {
            "nodesets": sorted(n for p in wanted for n in by_pool[p]),
            "configMap": {**base, **config},
        }
    site_conf = _mapping(settings.get("slurm_conf"), "slurm_cluster_slurm_conf")
    if not MEMORY_DEFAULTS & set(site_conf):
        _default_memory(partitions, plans)
    return partitions


def _default_memory(
    partitions: Mapping[str, dict[str, t.Any]], plans: Sequence[NodeSetPlan]
) -> None:
    """DefMemPerCPU of each partition: the smallest of its NodeSets' (a site's own wins)."""
    per_nodeset = {plan.name: plan.mem_per_cpu_mib for plan in plans}
    for part in partitions.values():
        sizes = [per_nodeset[n] for n in part["nodesets"] if per_nodeset.get(n)]
        if sizes and not MEMORY_DEFAULTS & set(part["configMap"]):
            part["configMap"]["DefMemPerCPU"] = min(sizes)


def _plans(
    settings: Mapping[str, t.Any], k8s_nodes: Sequence[Mapping[str, t.Any]]
) -> tuple[Mapping[str, t.Any], list[NodeSetPlan]]:
    pools = _mapping(settings.get("pools"), "slurm_cluster_pools")
    nodes = [Node.from_k8s(obj) for obj in k8s_nodes]
    prefix = str(settings.get("label_prefix", "hpcops.io")).rstrip("/")
    plans = plan_nodesets(
        pools,
        nodes,
        _mapping(settings.get("gpu_type_names"), "slurm_cluster_gpu_type_names"),
        f"{prefix}/slurm-lent",
    )
    return pools, plans


def _count(value: t.Any, var: str, low: int, high: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(var, f"{value!r} is not a number from {low} to {high}", fix)
    return value


def nodeset_object_name(release: str, key: str) -> str:
    """The NodeSet object the slurm chart makes of values key `key` (`nodesets.<key>`)."""
    return f"{release}-worker-{key}"


# The slurm chart's name (its `slurm.fullname` helper) and slurmctld's port when the values
# set none (`slurm.controller.port`; the operator's common.SlurmctldPort).
CHART_NAME = "slurm"
SLURMCTLD_PORT = 6817


def _chart_fullname(release: str, values: Mapping[str, t.Any]) -> str:
    """`slurm.fullname` of the chart: fullnameOverride, else the release when it holds the
    chart's name, else <release>-<name>; cut to 63 characters without a trailing dash."""
    override = str(values.get("fullnameOverride") or "")
    if override:
        return override[:63].rstrip("-")
    name = str(values.get("nameOverride") or CHART_NAME)
    fullname = release if name in release else f"{release}-{name}"
    return fullname[:63].rstrip("-")


def controller_name(release: str, values: Mapping[str, t.Any]) -> str:
    """The name of the Controller the chart makes (`slurm.fullname`)."""
    return _chart_fullname(release, values)


def controller_metrics_url(release: str, namespace: str, values: Mapping[str, t.Any]) -> str:
    """Where slurmctld serves its partitions' OpenMetrics inside the cluster.

    The operator names the Controller's Service `<Controller name>-controller` (Controller
    ServiceKey), the chart names the Controller `slurm.fullname`, and the Service listens on
    `controller.service.port` (default 6817), in the chart's namespace.
    """
    values = _mapping(values, "slurm_cluster_values")
    controller = _mapping(values.get("controller"), "slurm_cluster_values.controller")
    service = _mapping(controller.get("service"), "slurm_cluster_values.controller.service")
    port = _count(
        service.get("port") or SLURMCTLD_PORT,
        "slurm_cluster_values.controller.service.port",
        1,
        65535,
        "give the port of slurmctld's Service, for example 6817",
    )
    namespace = str(values.get("namespaceOverride") or namespace)
    host = f"{_chart_fullname(release, values)}-controller.{namespace}.svc"
    return f"http://{host}:{port}/metrics/partitions"


def autoscaling(
    settings: Mapping[str, t.Any], k8s_nodes: Sequence[Mapping[str, t.Any]]
) -> list[dict[str, t.Any]]:
    """The NodeSets whose pool asks for autoscaling, with the partition whose pending jobs
    drive them and their replica bounds; what the keda role turns into ScaledObjects."""
    pools, plans = _plans(settings, k8s_nodes)
    return _autoscaling(settings, pools, plans)


def _autoscaling(
    settings: Mapping[str, t.Any], pools: Mapping[str, t.Any], plans: Sequence[NodeSetPlan]
) -> list[dict[str, t.Any]]:
    site_partitions = _mapping(settings.get("partitions"), "slurm_cluster_partitions")
    scaled = []
    for plan in plans:
        raw = pools[plan.pool].get("autoscale")
        if raw is None:
            continue
        var = f"slurm_cluster_pools.{plan.pool}.autoscale"
        spec = _mapping(raw, var)
        if plan.scaling_mode != "StatefulSet":
            raise ConfigError(
                var,
                f"pool {plan.pool} is a {plan.scaling_mode} NodeSet, which has no replicas to scale",
                "autoscale dedicated pools with scaling_mode StatefulSet only",
            )
        unknown = sorted(set(spec) - {"min_replicas", "max_replicas", "pending_jobs", "partition"})
        if unknown:
            raise ConfigError(
                var,
                f"unknown keys {unknown}",
                "use min_replicas, max_replicas, pending_jobs, partition",
            )
        nodes = len(plan.nodes)
        fix = f"the pool has {nodes} nodes: scale between 0 and {nodes}"
        high = _count(spec.get("max_replicas", nodes), f"{var}.max_replicas", 1, nodes, fix)
        low = _count(spec.get("min_replicas", 0), f"{var}.min_replicas", 0, high, fix)
        partition = str(spec.get("partition", "batch"))
        pool_partitions = {"batch"} | {
            name
            for name, part in site_partitions.items()
            if plan.pool in (_mapping(part, f"slurm_cluster_partitions.{name}").get("pools") or [])
        }
        if partition not in pool_partitions:
            raise ConfigError(
                f"{var}.partition",
                f"pool {plan.pool} is not in partition {partition!r}",
                f"use one of {sorted(pool_partitions)}",
            )
        scaled.append(
            {
                "nodeset": plan.name,
                "partition": partition,
                "min_replicas": low,
                "max_replicas": high,
                # Pending jobs per replica: 1 adds a node for every job that waits.
                "pending_jobs": _count(
                    spec.get("pending_jobs", 1), f"{var}.pending_jobs", 1, 100000, "for example 1"
                ),
            }
        )
    return scaled


DEFAULT_LOGFILE_IMAGE = {"repository": "docker.io/library/alpine", "tag": "3.22"}
# The log sidecars' program when slurm_cluster_logfile_stops_on_term is on: slurmd's or
# slurmctld's log FIFO copied to the container's output, as Slinky's own sidecar does, but
# ending the moment SIGTERM comes. Slinky's waits for its `sleep 1` in the foreground (1.2)
# or ignores SIGTERM as PID 1 (1.1), which holds a slurmd pod that is going for another
# second or its whole grace, and with it the application that waits for the node.
LOGFILE_COMMAND = (
    "sh",
    "-c",
    "set -eu\n"
    'fifo="${SOCKET:-/tmp/logfile.log}"\n'
    'child=""\n'
    'stop=""\n'
    "trap 'stop=0; kill $child 2>/dev/null || true' TERM\n"
    "trap 'stop=1; kill $child 2>/dev/null || true' INT HUP\n"
    # A signal that lands between a child's fork and `child=$!` finds the one before it:
    # the look at $stop after the assignment stops the new one too.
    'run() { "$@" & child=$!; [ -z "$stop" ] || kill "$child" 2>/dev/null || true; '
    'wait "$child" || true; child=""; }\n'
    'mkdir -p "$(dirname "$fifo")"\n'
    '[ -p "$fifo" ] || { rm -f "$fifo"; mkfifo -m 777 "$fifo"; }\n'
    'while [ -z "$stop" ]; do run cat "$fifo"; [ -n "$stop" ] || run sleep 1; done\n'
    # Reaped before the exit, so no reader outlives its shell (outside a container too).
    "wait\n"
    'exit "$stop"\n',
)
GRES_AUTODETECT = ("nvidia", "nvml", "rsmi", "oneapi", "off")


# What the drain reason of every handover reclaim starts with ("hpcops: reclaim "), which a
# lendable slurmd's preStop hook looks for.
RECLAIM_REASON_PREFIX = HandoverMarkers().drain_reason("")


def prestop_leaving_reclaims(command: str) -> dict[str, t.Any]:
    """slurmd's lifecycle: the operator's preStop command, unless the handover's reclaim has
    drained the node (its reason), which stops slurmd and gives the node back itself.

    The operator's hook marks the node DOWN before the kubelet's SIGTERM: slurmctld then
    sends slurmd the kill of the node's jobs, and a slurmd busy with it holds its pod until
    the kubelet's SIGKILL (2 s at the reclaim's grace of 1 s, the pod's whole grace
    otherwise: measured in kind), where slurmd given SIGTERM first ends at once, its jobs'
    processes with its container. The reclaim marks the node DOWN itself once the pod has
    stopped, if the policy requeues its jobs.
    """
    script = (
        'case "$(scontrol show node "$(hostname)" 2>/dev/null)" in\n'
        f'  *"Reason={RECLAIM_REASON_PREFIX}"*) ;;\n'
        f"  *) {command} ;;\n"
        "esac\n"
    )
    return {"preStop": {"exec": {"command": ["/usr/bin/sh", "-c", script]}}}


def _conf_value(value: t.Any) -> t.Any:
    """A slurm.conf value as the chart must get it: it drops falsy values (an int 0 or
    False never reaches slurm.conf), so every scalar goes as a string."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return [_conf_value(item) for item in value]
    return value


def _conf_map(conf: Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {key: _conf_value(value) for key, value in conf.items()}


def _dotted(obj: Mapping[str, t.Any], path: str) -> bool:
    for part in path.split("."):
        if not isinstance(obj, Mapping) or part not in obj:
            return False
        obj = obj[part]
    return True


def _check_nodeset_keys(
    line: ChartLine, settings: Mapping[str, t.Any], values: Mapping[str, t.Any]
) -> None:
    """Refuse NodeSet fields the line's chart and CRD do not know, naming where they came from."""
    site_values = _mapping(settings.get("values"), "slurm_cluster_values")
    sources: list[tuple[str, Mapping[str, t.Any]]] = [
        ("slurm_cluster_nodeset_defaults", _mapping(settings.get("nodeset_defaults"), "")),
        ("slurm_cluster_values.nodesetDefaults", _mapping(site_values.get("nodesetDefaults"), "")),
    ]
    for name, raw in sorted(_mapping(settings.get("pools"), "").items()):
        sources.append(
            (f"slurm_cluster_pools.{name}.values", _mapping(raw, "").get("values") or {})
        )
    for name, raw in sorted(_mapping(site_values.get("nodesets"), "").items()):
        sources.append((f"slurm_cluster_values.nodesets.{name}", raw or {}))
    rendered = [values.get("nodesetDefaults") or {}, *values["nodesets"].values()]
    for key, why in line.unknown_nodeset_keys.items():
        if not any(_dotted(nodeset, key) for nodeset in rendered):
            continue
        where = next((var for var, src in sources if _dotted(src, key)), "slurm_cluster_values")
        raise ConfigError(f"{where}.{key}", f"Slinky {line.name} has no such NodeSet field", why)


def _nodeset_values(
    plan: NodeSetPlan,
    line: ChartLine,
    settings: Mapping[str, t.Any],
    pool: Mapping[str, t.Any],
    slurmd_image: Mapping[str, str],
    logfile: Mapping[str, t.Any],
    scaled: Mapping[str, Mapping[str, t.Any]],
) -> dict[str, t.Any]:
    """One NodeSet: the line's required fields, the site's defaults, the role's, the pool's."""
    prefix = str(settings.get("label_prefix", "hpcops.io")).rstrip("/")
    nodeset_defaults = _mapping(settings.get("nodeset_defaults"), "slurm_cluster_nodeset_defaults")
    extra_conf: dict[str, t.Any] = {}
    if plan.gres:
        extra_conf["Gres"] = [plan.gres]
    features = pool.get("features") or []
    if features:
        extra_conf["Features"] = list(features)
    pod_spec: dict[str, t.Any] = {
        "nodeSelector": {"kubernetes.io/os": "linux", **plan.node_selector}
    }
    if plan.exclude_gpu_products:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": GPU_PRODUCT_LABEL,
                                    "operator": "NotIn",
                                    "values": list(plan.exclude_gpu_products),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    tolerations: list[dict[str, str]] = []
    if pool.get("kind") == "lendable":
        tolerations.append({"key": f"{prefix}/lent", "operator": "Exists", "effect": "NoSchedule"})
    # slurm-bridge taints (NoExecute) every Kubernetes node named like a Slurm node, as a
    # DaemonSet NodeSet's nodes are (a lent node too, whatever its partition): their slurmd
    # stays through it.
    if plan.scaling_mode == "DaemonSet" and bridge_pool(_mapping(settings.get("pools"), "")):
        tolerations.extend(hybrid_tolerations())
    if tolerations:
        pod_spec["tolerations"] = tolerations
    slurmd: dict[str, t.Any] = {"image": dict(slurmd_image)}
    if pool.get("kind") == "lendable" and bool(settings.get("prestop_leaves_reclaims", True)):
        slurmd["lifecycle"] = prestop_leaving_reclaims(line.slurmd_prestop)
    nodeset = merged(
        merged(line.nodeset_base, nodeset_defaults),
        {
            "enabled": True,
            "scalingMode": plan.scaling_mode,
            "replicas": len(plan.nodes) if plan.scaling_mode == "StatefulSet" else 0,
            "slurmd": slurmd,
            "logfile": plain(logfile),
            "extraConfMap": extra_conf,
            "partition": {"enabled": False},
            "podSpec": pod_spec,
        },
    )
    if plan.scaling_mode == "StatefulSet" and "replicas" in pool:
        nodeset["replicas"] = _count(
            pool["replicas"],
            f"slurm_cluster_pools.{plan.pool}.replicas",
            0,
            len(plan.nodes),
            f"the pool has {len(plan.nodes)} nodes: lower it or add nodes to the pool",
        )
    if plan.name in scaled:
        # KEDA owns the count from here; Helm leaves a field it did not change alone.
        nodeset["replicas"] = scaled[plan.name]["min_replicas"]
    nodeset = merged(
        nodeset, _mapping(pool.get("values"), f"slurm_cluster_pools.{plan.pool}.values")
    )
    nodeset["extraConfMap"] = _conf_map(_mapping(nodeset.get("extraConfMap"), ""))
    return nodeset


def _controller_values(
    line: ChartLine,
    settings: Mapping[str, t.Any],
    conf: Mapping[str, t.Any],
    slurmctld_image: Mapping[str, str],
    logfile: Mapping[str, t.Any],
    autoscaled: bool,
) -> dict[str, t.Any]:
    """slurmctld: images, slurm.conf settings, metrics and how it takes a new slurm.conf."""
    service_monitor = settings.get("service_monitor")
    service_monitor = autoscaled if service_monitor in (None, "") else bool(service_monitor)
    labels = _mapping(
        settings.get("service_monitor_labels"), "slurm_cluster_service_monitor_labels"
    )
    controller: dict[str, t.Any] = {
        "slurmctld": {"image": dict(slurmctld_image)},
        "reconfigure": {"image": dict(slurmctld_image)},
        "logfile": plain(logfile),
        "extraConfMap": _conf_map(conf),
        # slurmctld's own OpenMetrics (slurm_partition_jobs_pending drives KEDA), and the
        # ServiceMonitor that has the Prometheus operator scrape them.
        "metrics": {
            "enabled": autoscaled or service_monitor,
            "serviceMonitor": {"enabled": service_monitor, "labels": dict(labels)},
        },
    }
    inplace = bool(settings.get("inplace_reconfigure", False))
    if line.inplace_reconfigure:
        # false: a changed slurm.conf recreates the slurmctld pod, so a bad change shows as a
        # failing pod instead of a silent rollback inside slurmctld (SchedMD's default).
        controller["inplaceReconfigure"] = inplace
    elif inplace:
        raise ConfigError(
            "slurm_cluster_inplace_reconfigure",
            f"Slinky {line.name} has no in-place reconfigure",
            "set it to false, or deploy Slinky 1.2 (slinky_version 1.2.x)",
        )
    return controller


def _config_files(
    settings: Mapping[str, t.Any],
    cgroup: Mapping[str, t.Any],
    release: tuple[int, int],
    plans: Sequence[NodeSetPlan],
) -> dict[str, str]:
    config_files = {"cgroup.conf": cgroup_conf(cgroup, release)}
    if any(plan.gres for plan in plans):
        # Without gres.conf a NodeSet's Gres= has no device files: jobs are not confined to
        # their GPUs (ConstrainDevices). Slinky 1.2 stopped writing it.
        autodetect = str(settings.get("gres_autodetect", "nvidia"))
        if autodetect not in GRES_AUTODETECT:
            raise ConfigError(
                "slurm_cluster_gres_autodetect",
                f"unknown AutoDetect {autodetect!r}",
                f"use one of {', '.join(GRES_AUTODETECT)}",
            )
        config_files["gres.conf"] = f"AutoDetect={autodetect}\n"
    return config_files


def slurm_image(settings: Mapping[str, t.Any], name: str) -> dict[str, str]:
    """The repository and tag of one of the Slurm images (slurmctld, login, ...)."""
    release = slurm_release(settings.get("slurm_version", ""), "slurm_cluster_slurm_version")
    image_os = release_line(settings["chart_version"], "slurm_cluster_chart_version").image_os
    registry = str(settings.get("image_registry", "ghcr.io/slinkyproject")).rstrip("/")
    tag = str(settings.get("image_tag") or f"{release[0]}.{release[1]:02d}-{image_os}")
    return {"repository": f"{registry}/{name}", "tag": tag}


def directory_objects(
    settings: Mapping[str, t.Any], bind_password: str, namespace: str
) -> list[dict[str, t.Any]]:
    """The Secret with the directory client's configuration (it holds the bind password)
    and the ConfigMap with the Slurm containers' nsswitch.conf; none without a directory."""
    directory = directory_settings(settings.get("directory"), slurm_image(settings, "login"))
    if directory is None:
        return []
    line = chart_line(settings.get("chart_version", ""), "slurm_cluster_chart_version")
    names = directory_names(str(settings.get("release") or CHART_NAME))
    labels = {"app.kubernetes.io/managed-by": "hpcops.slinky"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": names["secret"], "namespace": namespace, "labels": labels},
            "stringData": directory_conf(directory, bind_password, line.name),
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": names["nsswitch"], "namespace": namespace, "labels": labels},
            "data": {NSSWITCH_FILE: nsswitch_conf(directory)},
        },
    ]


def build_values(
    settings: Mapping[str, t.Any], k8s_nodes: Sequence[Mapping[str, t.Any]]
) -> dict[str, t.Any]:
    """The slurm chart's values for the site; ConfigError on a setting that cannot work."""
    release = slurm_release(settings.get("slurm_version", ""), "slurm_cluster_slurm_version")
    line = chart_line(settings.get("chart_version", ""), "slurm_cluster_chart_version")
    pools, plans = _plans(settings, k8s_nodes)
    scaled = {entry["nodeset"]: entry for entry in _autoscaling(settings, pools, plans)}

    def image(name: str) -> dict[str, str]:
        return slurm_image(settings, name)

    # The log sidecars: the chart's default (docker.io alpine:latest) is neither pinned nor
    # mirrored.
    logfile_image = dict(
        _mapping(settings.get("logfile_image"), "slurm_cluster_logfile_image")
        or DEFAULT_LOGFILE_IMAGE
    )
    if not logfile_image.get("repository") or not logfile_image.get("tag"):
        raise ConfigError(
            "slurm_cluster_logfile_image",
            "needs repository and tag",
            "give the mirrored image of the log sidecars, for example {repository: <mirror>/library/alpine, tag: '3.22'}",
        )

    logfile: dict[str, t.Any] = {"image": logfile_image}
    if bool(settings.get("logfile_stops_on_term", True)):
        logfile["command"] = list(LOGFILE_COMMAND)
    nodesets = {
        plan.name: _nodeset_values(
            plan, line, settings, pools[plan.pool], image("slurmd"), logfile, scaled
        )
        for plan in plans
    }
    partitions: dict[str, t.Any] = {}
    for name, part in plan_partitions(settings, plans, pools).items():
        partitions[name] = {
            "enabled": True,
            "nodesets": part["nodesets"],
            "configMap": _conf_map(part["configMap"]),
        }

    accounting = bool(settings.get("accounting", False))
    cgroup = _mapping(settings.get("cgroup"), "slurm_cluster_cgroup")
    conf: dict[str, t.Any] = {}
    if not line.operator_writes_defaults:
        cgroups = str(cgroup.get("CgroupPlugin", "")).strip() != "disabled"
        conf |= restated_slurm_conf(cgroups, accounting)
    conf |= {
        # Backfill jobs are requeued when a higher tier needs their nodes (handover grace).
        "PreemptType": "preempt/partition_prio",
        "PreemptMode": "REQUEUE",
        "JobRequeue": "1",
        "SchedulerType": "sched/backfill",
    }
    if accounting:
        conf |= ACCOUNTING_POLICY
    conf.update(mcs_settings(str(settings.get("mcs", "none")), accounting, release))
    conf |= _bridge_conf(settings, pools, release)
    conf.update(_mapping(settings.get("slurm_conf"), "slurm_cluster_slurm_conf"))

    controller = _controller_values(line, settings, conf, image("slurmctld"), logfile, bool(scaled))
    jwt_secret = _mapping(settings.get("jwt_secret"), "slurm_cluster_jwt_secret")
    values: dict[str, t.Any] = {
        "clusterName": settings.get("name", "slurm"),
        "jwtKey": {
            "create": False,
            "secretRef": {
                "name": jwt_secret.get("name", "slurm-jwt-key"),
                "key": jwt_secret.get("key", "jwt_hs256.key"),
            },
        },
        "configFiles": _config_files(settings, cgroup, release, plans),
        "controller": controller,
        "restapi": {"slurmrestd": {"image": image("slurmrestd")}},
        "accounting": {"enabled": accounting, "slurmdbd": {"image": image("slurmdbd")}},
        "nodesets": nodesets,
        "partitions": partitions,
    }
    if accounting:
        values["accounting"]["storageConfig"] = accounting_storage(
            settings.get("accounting_database")
        )
    if not line.operator_writes_defaults:
        # A login set a site enables through slurm_cluster_values pulls from the mirror too.
        values["loginsetDefaults"] = {
            "login": {"image": image("login")},
            "initconf": {"image": logfile_image},
        }
    # Nodes the handover lends or slurm-bridge taints: no service or login pod of Slurm's.
    shared_selectors = [
        {str(k): str(v) for k, v in _mapping(pool.get("node_selector"), "").items()}
        for pool in pools.values()
        if pool.get("kind") in ("lendable", BRIDGE_KIND)
    ]
    login_sets = login_set_values(
        settings.get("login_sets"),
        image("login"),
        logfile_image,
        shared_selectors,
        [Node.from_k8s(obj).labels for obj in k8s_nodes],
    )
    if login_sets:
        values["loginsets"] = login_sets
    directory = directory_settings(settings.get("directory"), image("login"))
    values = merged(line.chart_defaults_off, values)
    values = merged(values, _mapping(settings.get("values"), "slurm_cluster_values"))
    _check_nodeset_keys(line, settings, values)
    keep_services_off_shared_pools(values, shared_selectors)
    # After the site's values: the directory's pieces join the pods' own lists.
    add_directory(values, directory, str(settings.get("release") or CHART_NAME))
    if accounting and not values["accounting"].get("external"):
        _wait_for_slurmdbd(values, str(settings.get("release") or CHART_NAME), settings)
    return values


# Slurm's own services: one of them on a lendable node would hold that node back from
# every lend (the handover refuses a node that runs application pods); on a bridge node the
# bridge's NoExecute taint would evict it.
SERVICE_PARTS = ("controller", "restapi", "accounting")


def keep_services_off_shared_pools(
    values: dict[str, t.Any], shared_selectors: Sequence[Mapping[str, str]]
) -> None:
    """A required node affinity off every lendable and bridge pool for slurmctld, slurmrestd
    and slurmdbd, unless the site's values give the pod a node affinity of its own."""
    affinity = away_from_pools(shared_selectors)
    if not affinity:
        return
    for part in SERVICE_PARTS:
        if values.get(part, {}).get("enabled") is False:
            continue
        pod_spec = values.setdefault(part, {}).setdefault("podSpec", {})
        own = pod_spec.get("affinity") or {}
        if own.get("nodeAffinity"):
            continue
        pod_spec["affinity"] = {**own, **plain(affinity)}


# The operator names the Accounting's Service after it (`<slurm.fullname>-accounting`) and
# serves slurmdbd on 6819 (its common.SlurmdbdPort).
SLURMDBD_PORT = 6819
WAIT_FOR_SLURMDBD = "wait-for-slurmdbd"
# bash's /dev/tcp needs no tool the slurmctld image may lack. It gives up after the limit:
# a first start needs slurmdbd (slurmctld cannot enforce associations it never read), but a
# restart during a database outage must not leave the cluster without slurmctld, which
# then runs from the associations it saved and keeps its jobs.
WAIT_FOR_SLURMDBD_SCRIPT = """host=$1 port=$2 limit=$3
for ((waited = 0; waited < limit; waited += 2)); do
  if (echo >"/dev/tcp/$host/$port") 2>/dev/null; then
    echo "slurmdbd answers at $host:$port"
    exit 0
  fi
  sleep 2
done
echo "slurmdbd at $host:$port did not answer in ${limit}s: slurmctld starts without it" >&2
"""


def _wait_for_slurmdbd(
    values: dict[str, t.Any], release: str, settings: Mapping[str, t.Any]
) -> None:
    """Start slurmctld only once slurmdbd answers: an init container in its pod (a
    slurmctld started first never became ready in Slinky's reports, slurm-operator #27)."""
    wait_s = _count(
        settings.get("accounting_wait_s", 600),
        "slurm_cluster_accounting_wait_s",
        0,
        86400,
        "give the seconds slurmctld waits for slurmdbd when it starts (0: it does not wait)",
    )
    if wait_s == 0:
        return
    controller = values["controller"]
    image = controller["slurmctld"]["image"]
    pod_spec = controller.setdefault("podSpec", {})
    init_containers = list(pod_spec.get("initContainers") or [])
    if any(container.get("name") == WAIT_FOR_SLURMDBD for container in init_containers):
        return  # the site's own, through slurm_cluster_values
    host = f"{_chart_fullname(release, values)}-accounting"
    init_containers.insert(
        0,
        {
            "name": WAIT_FOR_SLURMDBD,
            "image": f"{image['repository']}:{image['tag']}",
            "command": ["bash", "-c", WAIT_FOR_SLURMDBD_SCRIPT, WAIT_FOR_SLURMDBD, host,
                        str(SLURMDBD_PORT), str(wait_s)],
        },
    )  # fmt: skip
    pod_spec["initContainers"] = init_containers
