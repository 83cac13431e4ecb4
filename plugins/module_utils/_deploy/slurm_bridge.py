# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm-bridge: Slurm as the scheduler of Kubernetes pods (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

The bridge submits one Slurm *external job* per pod group to its partition and binds the
pods to the nodes Slurm allocates.  Its nodes are a pool of kind ``bridge`` in
``slurm_cluster_pools``, in one of two ways (slurm-bridge ``docs/config.md``):

* ``hybrid``: a DaemonSet NodeSet of slurmd beside the kubelets; the Slurm node is the
  Kubernetes node (the operator names a DaemonSet pod's host after the node's first DNS
  label).  slurmd tolerates the bridge's ``NoExecute`` taint on its managed nodes.
* ``external``: no slurmd; the bridge's node controller registers each labelled Kubernetes
  node in Slurm as ``State=External`` with the partition as a feature, which a
  ``NodeSet=<partition> Feature=<partition>`` line puts in the partition.

Either way the bridge maps a Slurm node to the Kubernetes node of the same name, or to the
one labelled ``slinky.slurm.net/slurm-nodename=<slurm name>`` where the names differ.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.slinky_tokens import (
    LIFETIME_LEFT_AT_RENEWAL,
    go_duration_s,
)

POOLS_VAR = "slurm_cluster_pools"
BRIDGE_KIND = "bridge"
NODE_MODES = ("hybrid", "external")
DEFAULT_PARTITION = "slurm-bridge"
POOL_KEYS = frozenset(
    {
        "kind",
        "node_selector",
        "nodes",
        "partition",
        "partition_config",
        "features",
        "default_mem_per_cpu_mib",
        "values",
    }
)
# The bridge's own names (internal/wellknown of slurm-bridge v1.2.1).
MANAGED_NODE_TAINT = "slinky.slurm.net/managed-node"
SLURM_NODENAME_LABEL = "slinky.slurm.net/slurm-nodename"
EXTERNAL_NODE_LABEL = "scheduler.slinky.slurm.net/external-node"
EXTERNAL_PARTITIONS_ANNOTATION = "scheduler.slinky.slurm.net/external-node-partitions"
# What the bridge needs (its README): external jobs came with Slurm 25.11's data parser.
MIN_SLURM = (25, 11)
MIN_KUBERNETES = (1, 35)
# The MCS plugins whose label the bridge's jobs can carry (McsLabel=<mcs_label>): mcs/group and
# user take only the job's own group or user as a label; mcs/account takes its account, so
# the slurm_bridge role runs the bridge's jobs in an account named as the label.
MCS_PLUGINS = ("none", "label", "account")
UNBRIDGED_SUFFIX = ".not-bridged"
PARTITION_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
NO_BRIDGE_POOL = (
    f"{POOLS_VAR}: no pool of kind bridge, so slurm-bridge has no nodes: add one, for "
    "example {bridge: {kind: bridge, node_selector: {hpcops.io/pool: bridge}}}"
)


@dataclass(frozen=True)
class BridgePool:
    """The pool of kind ``bridge``: where the bridge's pods (and Slurm's jobs) run."""

    name: str
    node_selector: Mapping[str, str]
    mode: str
    partition: str

    @property
    def var(self) -> str:
        return f"{POOLS_VAR}.{self.name}"


def _mapping(value: t.Any, variable: str) -> Mapping[str, t.Any]:
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            variable, f"expected a mapping, got {type(value).__name__}", "write key: value pairs"
        )
    return value


def bridge_pool(pools: Mapping[str, t.Any]) -> BridgePool | None:
    """The site's bridge pool, checked; None when it has none."""
    found = [
        (str(name), _mapping(pool, f"{POOLS_VAR}.{name}"))
        for name, pool in sorted(pools.items())
        if isinstance(pool, Mapping) and pool.get("kind") == BRIDGE_KIND
    ]
    if not found:
        return None
    if len(found) > 1:
        raise ConfigError(
            POOLS_VAR,
            f"pools {[name for name, _pool in found]} are all of kind bridge",
            "slurm-bridge schedules into one partition: keep one pool of kind bridge",
        )
    name, pool = found[0]
    var = f"{POOLS_VAR}.{name}"
    unknown = sorted(set(pool) - POOL_KEYS)
    if unknown:
        raise ConfigError(
            f"{var}.{unknown[0]}",
            "is not a setting of a bridge pool",
            f"use {', '.join(sorted(POOL_KEYS))}",
        )
    mode = pool.get("nodes", "hybrid")
    if mode not in NODE_MODES:
        raise ConfigError(
            f"{var}.nodes",
            f"unknown mode {mode!r}",
            "use 'hybrid' (slurmd beside the kubelets) or 'external' (nodes the bridge registers)",
        )
    partition = pool.get("partition", DEFAULT_PARTITION)
    if not isinstance(partition, str) or not PARTITION_RE.match(partition):
        raise ConfigError(
            f"{var}.partition",
            f"{partition!r} is not a partition name",
            "use lower-case letters, digits and '-', for example slurm-bridge",
        )
    selector = _mapping(pool.get("node_selector"), f"{var}.node_selector")
    return BridgePool(name, {str(k): str(v) for k, v in selector.items()}, mode, partition)


def check_bridge_cluster(
    bridge: BridgePool, slurm_release: tuple[int, int], mcs_plugin: str
) -> None:
    """What the Slurm side must be for the bridge to work; ConfigError otherwise."""
    if slurm_release < MIN_SLURM:
        raise ConfigError(
            "slurm_cluster_slurm_version",
            f"Slurm {slurm_release[0]}.{slurm_release[1]:02d} has no external jobs, which "
            f"slurm-bridge submits (pool {bridge.name} is of kind bridge)",
            f"run Slurm {MIN_SLURM[0]}.{MIN_SLURM[1]:02d} or newer, or remove the bridge pool",
        )
    if mcs_plugin not in MCS_PLUGINS:
        raise ConfigError(
            "slurm_cluster_mcs",
            f"mcs/{mcs_plugin} refuses the label slurm-bridge gives its jobs (slurm_bridge_mcs_label)",
            "use 'label' (for example 'label:ondemand,ondemandselect', which keeps Slurm's and "
            "the bridge's jobs apart), 'account' (the bridge's jobs then run in the account "
            "slurm_bridge_mcs_label names) or 'none'",
        )


def hybrid_tolerations() -> list[dict[str, str]]:
    """slurmd on a bridge node stays through the taint the bridge puts on the nodes it manages."""
    return [{"key": MANAGED_NODE_TAINT, "operator": "Exists", "effect": "NoExecute"}]


def external_conf(bridge: BridgePool, config: Mapping[str, t.Any]) -> dict[str, str]:
    """slurm.conf lines of an external bridge pool: the nodes the bridge registers carry the
    partition as a feature, which this NodeSet line gathers into the partition."""
    words = " ".join(f"{key}={value}" for key, value in config.items())
    return {
        "NodeSet": f"{bridge.partition} Feature={bridge.partition}",
        "PartitionName": f"{bridge.partition} Nodes={bridge.partition} {words}".strip(),
    }


def slurm_node_name(k8s_name: str, labels: Mapping[str, str]) -> str:
    """The Slurm node the bridge maps a Kubernetes node to."""
    return labels.get(SLURM_NODENAME_LABEL) or k8s_name.split(".", 1)[0]


def unbridged_name(k8s_name: str) -> str:
    """A Slurm name label no Slurm node has (Slurm node names have no dot): the bridge then
    never takes the node for one of Slurm's."""
    return f"{k8s_name.split('.', 1)[0][: 63 - len(UNBRIDGED_SUFFIX)]}{UNBRIDGED_SUFFIX}"


def node_marks(
    bridge: BridgePool,
    k8s_nodes: Sequence[Mapping[str, t.Any]],
    lendable_selectors: Sequence[Mapping[str, str]] = (),
) -> dict[str, dict[str, dict[str, str]]]:
    """The labels and annotations each bridge node needs, by Kubernetes node name.

    A node whose name has a domain gets the Slurm name label (slurmd's DaemonSet pod and the
    bridge both use the first label); an external node also gets the bridge's registration
    label and its partition. A node of a lendable pool (lendable_selectors) gets a Slurm
    name label no Slurm node has: the bridge taints (NoExecute) every node named like a Slurm
    node, a lent one too, and acting on what it read from Slurm tens of seconds before, it
    taints a node the handover has just given back and evicts the application there."""
    marks: dict[str, dict[str, dict[str, str]]] = {}

    def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    for obj in k8s_nodes:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = dict(meta.get("labels") or {})
        wanted_labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if selects(bridge.node_selector, labels):
            if "." in name and SLURM_NODENAME_LABEL not in labels:
                wanted_labels[SLURM_NODENAME_LABEL] = slurm_node_name(name, labels)
            if bridge.mode == "external":
                wanted_labels[EXTERNAL_NODE_LABEL] = "true"
                annotations[EXTERNAL_PARTITIONS_ANNOTATION] = bridge.partition
        elif any(selects(selector, labels) for selector in lendable_selectors):
            if labels.get(SLURM_NODENAME_LABEL) != unbridged_name(name):
                wanted_labels[SLURM_NODENAME_LABEL] = unbridged_name(name)
        else:
            continue
        marks[name] = {"labels": wanted_labels, "annotations": annotations}
    return marks


def kubernetes_release(git_version: str) -> tuple[int, int]:
    """'v1.36.2' (the apiserver's gitVersion) -> (1, 36)."""
    match = re.match(r"^v?(\d+)\.(\d+)", str(git_version))
    if not match:
        raise ConfigError(
            "kubernetes",
            f"the apiserver's version {git_version!r} is not a Kubernetes release",
            "check the cluster the inventory points at",
        )
    return int(match.group(1)), int(match.group(2))


def bridge_problems(
    pools: Mapping[str, t.Any],
    k8s_nodes: Sequence[Mapping[str, t.Any]],
    k8s_version: str,
    slurm_nodes: Sequence[str] = (),
) -> list[str]:
    """What stops the bridge before any change: each a sentence with the setting and the fix.

    slurm_nodes: the bridge partition's Slurm nodes where slurmctld already runs (empty on a
    new site), each of which must map to a Kubernetes node."""
    problems: list[str] = []
    try:
        bridge = bridge_pool(pools)
    except ConfigError as err:
        return [str(err)]
    if bridge is None:
        return [NO_BRIDGE_POOL]
    release = kubernetes_release(k8s_version)
    if release < MIN_KUBERNETES:
        problems.append(
            f"kubernetes: the cluster runs {release[0]}.{release[1]}, slurm-bridge needs "
            f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]} or newer: upgrade Kubernetes first, or "
            "leave slurm_bridge out of slinky_components"
        )
    members = {
        str((obj.get("metadata") or {}).get("name", "")): dict(
            (obj.get("metadata") or {}).get("labels") or {}
        )
        for obj in k8s_nodes
    }
    selected = {
        name
        for name, labels in members.items()
        if all(labels.get(k) == v for k, v in bridge.node_selector.items())
    }
    if not selected:
        problems.append(
            f"{bridge.var}.node_selector: selects no Kubernetes node "
            f"({dict(bridge.node_selector)}): label the bridge's nodes or fix the selector"
        )
    mapped = {slurm_node_name(name, members[name]) for name in members}
    unmapped = sorted(set(slurm_nodes) - mapped)
    if unmapped:
        problems.append(
            f"{bridge.var}: partition {bridge.partition} holds Slurm nodes {unmapped} that map "
            f"to no Kubernetes node: label each node {SLURM_NODENAME_LABEL}=<Slurm name>, or "
            "take them out of the partition"
        )
    return problems


TOKEN_ROLLOUT_VARS = {
    "image": "slurm_bridge_token_rollout_image",
    "every": "slurm_bridge_token_rollout_every_min",
    "lifetime": "slurm_bridge_token_lifetime",
}


def token_rollout_schedule(enabled: bool, image: str, every_min: t.Any, lifetime: t.Any) -> str:
    """The CronJob schedule that replaces the bridge's pods after the operator renewed their
    token ('' when turned off); ConfigError naming the setting and the fix.

    The bridge reads its token once, from an environment variable, so its pods must be
    replaced while the token they started with is still valid: within the last fifth of the
    lifetime. A run every ``every_min`` minutes comes in time when ``every_min`` is less than
    that fifth."""
    names = TOKEN_ROLLOUT_VARS
    lifetime_s = go_duration_s(lifetime)
    if not lifetime_s:
        raise ConfigError(
            names["lifetime"],
            f"{lifetime!r} is not a duration",
            "write it as Kubernetes does, for example 24h or 90m",
        )
    window_min = lifetime_s * LIFETIME_LEFT_AT_RENEWAL / 60
    if not enabled:
        return ""
    if not str(image or "").strip():
        raise ConfigError(
            names["image"],
            "is empty, and the bridge reads its slurmrestd token only when it starts while the "
            f"operator renews it every {lifetime_s * (1 - LIFETIME_LEFT_AT_RENEWAL) / 3600:g}h",
            "give the image built from execution-environment.yml (docs/site.md; "
            "handover_schedule_image's by default), or set slurm_bridge_token_rollout: false "
            f"and run site.yml at least every {window_min:g} min",
        )
    # The role's argument spec takes "30" for an int as well; a bool is no number of minutes.
    if isinstance(every_min, str) and every_min.strip().isdigit():
        every_min = int(every_min)
    if isinstance(every_min, bool) or not isinstance(every_min, int):
        raise ConfigError(names["every"], f"{every_min!r} is not a whole number", "give minutes")
    if 1 <= every_min <= 59:
        schedule = f"*/{every_min} * * * *"
    elif every_min % 60 == 0 and 60 <= every_min <= 720:
        schedule = f"0 */{every_min // 60} * * *"
    else:
        raise ConfigError(
            names["every"],
            f"{every_min} is neither 1 to 59 minutes nor a whole number of hours up to 12",
            "give one of those (a cron schedule repeats within the hour or the day)",
        )
    if every_min >= window_min:
        raise ConfigError(
            names["every"],
            f"{every_min} min is not less than the last fifth of {names['lifetime']} "
            f"({lifetime}: {window_min:g} min), while the token the bridge started with is "
            "still valid",
            "lower it, or lengthen the lifetime",
        )
    return schedule
