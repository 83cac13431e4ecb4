# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the bare-metal preflight (playbooks/preflight.yml, the node_prep role).

The documentation of each filter is in the YAML file of the same name beside this one.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight import report
from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.checks import (
    HostInput,
    PoolSettings,
    PreflightError,
    Settings,
    evaluate,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.inventory import (
    inventory_problems,
    pool_of_hosts,
)

_SCALARS = {
    "slurm_version": str,
    "cgroup_driver": str,
    "kernel_min": str,
    "cpu_manager_policy": str,
    "topology_manager_policy": str,
    "gpu_driver_managed": bool,
    "gpu_cdi": bool,
    "pod_cidr": str,
    "service_cidr": str,
    "mtu": int,
    "slurm_uid": int,
    "slurm_gid": int,
}


def _mapping(name: str, value: t.Any, what: str) -> dict[str, t.Any]:
    if not isinstance(value, dict):
        raise AnsibleFilterError(
            f"{name}: expected {what} as a mapping, got {type(value).__name__}"
        )
    return value


def _settings(config: dict[str, t.Any]) -> Settings:
    pools_config = _mapping("node_preflight", config.get("pools"), "pools (slurm_cluster_pools)")
    taints = config.get("pool_taints") or {}
    gpu_pools = set(config.get("gpu_pools") or [])
    pools = {
        name: PoolSettings(
            kind=str((pool or {}).get("kind", "dedicated")),
            labels={k: str(v) for k, v in ((pool or {}).get("node_selector") or {}).items()},
            taints=list(taints.get(name) or []),
            gpu=name in gpu_pools,
        )
        for name, pool in pools_config.items()
    }
    scalars = {
        k: cast(config[k]) for k, cast in _SCALARS.items() if config.get(k) not in (None, "")
    }
    return Settings(
        pools=pools,
        kernel_modules=list(config.get("kernel_modules") or []),
        sysctls={str(k): str(v) for k, v in (config.get("sysctls") or {}).items() if v is not None},
        site_networks=[str(n) for n in config.get("site_networks") or []],
        shared_mounts=[str(p) for p in config.get("shared_mounts") or []],
        waived=[str(w) for w in config.get("waived") or []],
        **scalars,
    )


def node_preflight(facts: t.Any, nodes: t.Any = None, config: t.Any = None) -> list[dict[str, str]]:
    """Every check on every host: each host's facts, the Nodes, the settings."""
    facts = _mapping("node_preflight", facts, "each host's facts (node_preflight_facts)")
    config = _mapping("node_preflight", config, "the settings")
    if not isinstance(nodes, list):
        raise AnsibleFilterError(
            "node_preflight: expected the Kubernetes Nodes (k8s_info resources)"
        )
    settings = _settings(config)
    owners = pool_of_hosts(
        config.get("groups") or {}, list(settings.pools), str(config.get("prefix"))
    )
    node_names = config.get("node_names") or {}
    inputs = []
    for name, host_facts in sorted(facts.items()):
        if name not in owners:
            raise AnsibleFilterError(f"node_preflight: host {name} is in no pool group")
        inputs.append(
            HostInput(
                name=name,
                pool=owners[name][0],
                node_name=str(node_names.get(name) or name),
                facts=host_facts or {},
            )
        )
    try:
        results = evaluate(inputs, nodes, settings, config.get("gpu_labels") or {})
    except PreflightError as err:
        raise AnsibleFilterError(f"node_preflight: {err}") from None
    return [result.as_dict() for result in results]


def node_preflight_report(results: t.Any) -> dict[str, t.Any]:
    """The results as a table, the problems with their fixes, and the counts."""
    if not isinstance(results, list):
        raise AnsibleFilterError("node_preflight_report: expected the list node_preflight returns")
    return {
        "table": report.table(results),
        "problems": report.problems(results),
        **report.summary(results),
    }


def node_prep_inventory_problems(groups: t.Any, config: t.Any = None) -> list[str]:
    """What is wrong with the node hosts of the inventory (pools, networks, batch size)."""
    groups = _mapping("node_prep_inventory_problems", groups, "the inventory's groups")
    config = _mapping("node_prep_inventory_problems", config, "the settings")
    try:
        return inventory_problems(
            groups=groups,
            pools=list((config.get("pools") or {}).keys()),
            prefix=str(config.get("prefix")),
            node_group=str(config.get("node_group")),
            node_names=config.get("node_names") or {},
            networks=config.get("networks") or {},
            gpu_pools=list(config.get("gpu_pools") or []),
            batch=config.get("batch", 1),
        )
    except PreflightError as err:
        raise AnsibleFilterError(f"node_prep_inventory_problems: {err}") from None


def node_prep_sysctl_values(wanted: t.Any, current: t.Any = None) -> dict[str, str]:
    """The value to set per sysctl: exact ones as given, ">=N" the higher of N and the host's."""
    wanted = _mapping("node_prep_sysctl_values", wanted, "the sysctls (name to value)")
    current = current or {}
    values = {}
    for name, value in wanted.items():
        if value is None:
            continue  # a site turned the default off
        text = str(value).strip()
        if text.startswith(">="):
            floor = int(text[2:].strip())
            try:
                have = int(str(current.get(name)).split()[0])
            except (ValueError, IndexError):
                have = floor
            values[name] = str(max(floor, have))
        else:
            values[name] = text
    return values


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "node_preflight": node_preflight,
            "node_preflight_report": node_preflight_report,
            "node_prep_inventory_problems": node_prep_inventory_problems,
            "node_prep_sysctl_values": node_prep_sysctl_values,
        }
