# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the inventory of node hosts, checked before anything runs on them.

Hosts sit in one group per pool, `<prefix><pool>` (slinky_pool_cpu for pool cpu), the
pools of `slurm_cluster_pools`. Pure: every problem names the variable or group and the fix.
"""

from __future__ import annotations

import math
import typing as t
from collections.abc import Iterable, Mapping

from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.checks import (
    require_netaddr,
)


def pool_of_hosts(
    groups: Mapping[str, list[str]], pools: list[str], prefix: str
) -> dict[str, list[str]]:
    """Each host and the pools whose group lists it (more than one is a problem)."""
    claimed: dict[str, list[str]] = {}
    for pool in pools:
        for host in groups.get(prefix + pool) or []:
            claimed.setdefault(host, []).append(pool)
    return claimed


def batch_size(batch: t.Any, total: int) -> int:
    """How many hosts `serial: <batch>` puts in one batch (Ansible's rule: at least 1)."""
    text = str(batch).strip()
    size = math.floor(total * float(text[:-1]) / 100) if text.endswith("%") else int(text)
    return max(1, min(size, total)) if total else 0


def _group_problems(
    groups: Mapping[str, list[str]], pools: list[str], prefix: str, node_group: str
) -> list[str]:
    problems = []
    listed = set(groups.get(node_group) or [])
    for group in sorted(groups):
        if group.startswith(prefix) and group[len(prefix) :] not in pools:
            problems.append(
                f"inventory group {group}: slurm_cluster_pools has no pool "
                f"{group[len(prefix) :]!r} (pools: {', '.join(sorted(pools)) or 'none'}); rename "
                "the group or add the pool"
            )
    claimed = pool_of_hosts(groups, pools, prefix)
    for host in sorted(listed - set(claimed)):
        problems.append(
            f"host {host} is in group {node_group} but in no pool group: put it in one of "
            + ", ".join(prefix + p for p in sorted(pools))
        )
    for host in sorted(set(claimed) - listed):
        problems.append(
            f"host {host} is in {prefix}{claimed[host][0]} but not in {node_group}: make the "
            f"pool groups children of {node_group}"
        )
    for host, owners in sorted(claimed.items()):
        if len(owners) > 1:
            problems.append(
                f"host {host} is in "
                + " and ".join(prefix + p for p in owners)
                + ": a host belongs to one pool"
            )
    if claimed:
        for pool in sorted(pools):
            if not groups.get(prefix + pool):
                problems.append(
                    f"pool {pool} of slurm_cluster_pools has no hosts: list them in group "
                    f"{prefix}{pool} (a child of {node_group})"
                )
    return problems


def _node_name_problems(claimed: Iterable[str], node_names: Mapping[str, str]) -> list[str]:
    problems = []
    seen: dict[str, str] = {}
    for host in sorted(claimed):
        node = node_names.get(host, host)
        if node in seen:
            problems.append(
                f"hosts {seen[node]} and {host} both map to Kubernetes Node {node}: "
                "set slinky_node_name on one of them"
            )
        seen[node] = host
    return problems


def _network_problems(networks: Mapping[str, t.Any]) -> list[str]:
    problems = []
    for variable, value in networks.items():
        for cidr in value if isinstance(value, list) else [value]:
            if cidr not in (None, "") and not _is_cidr(cidr):
                problems.append(
                    f"{variable}: {cidr!r} is not a network in CIDR form (for example 10.244.0.0/16)"
                )
    return problems


def _batch_problems(
    groups: Mapping[str, list[str]], pools: list[str], prefix: str, batch: t.Any, total: int
) -> list[str]:
    try:
        size = batch_size(batch, total)
    except ValueError:
        return [f"node_prep_batch: {batch!r} is neither a number of hosts nor a percentage"]
    problems = []
    for pool in sorted(pools):
        members = len(groups.get(prefix + pool) or [])
        if members > 1 and size >= members:
            problems.append(
                f"node_prep_batch: {size} hosts per batch could restart all {members} hosts of "
                f"pool {pool} at once; give node_prep_batch at most {members - 1}"
            )
    return problems


def inventory_problems(
    *,
    groups: Mapping[str, list[str]],
    pools: list[str],
    prefix: str,
    node_group: str,
    node_names: Mapping[str, str],
    networks: Mapping[str, t.Any],
    gpu_pools: list[str],
    batch: t.Any,
) -> list[str]:
    """What is wrong with the node hosts of the inventory; empty when nothing is."""
    require_netaddr()
    claimed = pool_of_hosts(groups, pools, prefix)
    problems = _group_problems(groups, pools, prefix, node_group)
    problems += _node_name_problems(claimed, node_names)
    problems += _network_problems(networks)
    problems += [
        f"node_prep_gpu_pools: no pool {pool!r} in slurm_cluster_pools "
        f"(pools: {', '.join(sorted(pools))})"
        for pool in gpu_pools
        if pool not in pools
    ]
    problems += _batch_problems(groups, pools, prefix, batch, len(claimed))
    return problems


def _is_cidr(value: t.Any) -> bool:
    netaddr = require_netaddr()
    text = str(value)
    if "/" not in text:
        return False
    try:
        network = netaddr.IPNetwork(text)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return False
    return bool(network.ip == network.network)
