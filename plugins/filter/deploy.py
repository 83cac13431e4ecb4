# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters the deploy roles use to build Helm arguments and chart values.

The documentation of each filter is in the YAML file of the same name beside this one.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy import mariadb, rollout
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.helm_chart import (
    ChartSourceError,
    chart_args,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_release import (
    VERSION_VARIABLES,
    ReleaseError,
    mirrored_image,
    resolve,
    version_problems,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.storage import (
    controller_storage_problems,
)

if t.TYPE_CHECKING:
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
        BridgePool,
    )

# The large modules (the slurm chart's values, login sets, MetalLB, the bridge, upgrades) are
# imported inside the filters that use them: Ansible imports every filter file of the
# collection in each task's worker process, and compiles each module from its source there.


def helm_chart_args(
    source: t.Any, version: t.Any = None, variable: str = "chart"
) -> dict[str, t.Any]:
    """chart_ref, chart_repo_url and chart_version for kubernetes.core.helm."""
    try:
        return chart_args(source, version, variable)
    except ChartSourceError as err:
        raise AnsibleFilterError(str(err)) from None


def _cluster_inputs(name: str, settings: t.Any, nodes: t.Any) -> None:
    if not isinstance(settings, dict):
        raise AnsibleFilterError(
            f"{name}: expected the role's settings as a mapping, got {type(settings).__name__}"
        )
    if not isinstance(nodes, list):
        raise AnsibleFilterError(
            f"{name}: expected the list of Kubernetes Nodes (k8s_info resources)"
        )


def slurm_cluster_values(settings: t.Any, nodes: t.Any = None) -> dict[str, t.Any]:
    """Values of the Slinky slurm chart from the slurm_cluster role's settings and the Nodes."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
        build_values,
    )

    _cluster_inputs("slurm_cluster_values", settings, nodes)
    try:
        return build_values(settings, nodes)
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def slurm_cluster_storage_problems(
    values: t.Any, storage_classes: t.Any, controllers: t.Any = None, release: str = "slurm"
) -> list[str]:
    """Why the chart values' claims would not bind or cannot change, given the cluster's
    StorageClasses and the Controllers already in the release's namespace."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
        controller_name,
    )

    if not isinstance(values, dict) or not isinstance(storage_classes, list):
        raise AnsibleFilterError(
            "slurm_cluster_storage_problems: expected the chart values (a mapping) and the "
            "StorageClasses (k8s_info resources)"
        )
    name = controller_name(release, values)
    existing = next(
        (item for item in controllers or [] if (item.get("metadata") or {}).get("name") == name),
        None,
    )
    return controller_storage_problems(values, storage_classes, existing)


def mariadb_resource(settings: t.Any) -> dict[str, t.Any]:
    """The mariadb-operator's MariaDB resource for slurmdbd from the mariadb role's settings."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("mariadb_resource: expected the role's settings (a mapping)")
    try:
        return mariadb.mariadb_resource(settings)
    except mariadb.MariadbConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def mariadb_storage_problems(
    resource: t.Any, storage_classes: t.Any, existing: t.Any = None
) -> list[str]:
    """Why the MariaDB's claim would not bind, or cannot change."""
    if not isinstance(resource, dict) or not isinstance(storage_classes, list):
        raise AnsibleFilterError(
            "mariadb_storage_problems: expected the MariaDB resource (a mapping) and the "
            "StorageClasses (k8s_info resources)"
        )
    found = existing[0] if isinstance(existing, list) and existing else existing or None
    return mariadb.mariadb_storage_problems(resource, storage_classes, found)


def metallb_pool_problems(
    pools: t.Any,
    node_networks: t.Any = None,
    node_addresses: t.Any = None,
    service_cidr: t.Any = "",
    pod_cidr: t.Any = "",
) -> list[str]:
    """Every problem of MetalLB's address pools, each naming the variable and the fix."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy import metallb

    if node_addresses is not None and not isinstance(node_addresses, list):
        raise AnsibleFilterError("metallb_pool_problems: expected the Nodes' addresses as a list")
    try:
        return metallb.address_pool_problems(
            pools,
            node_networks or [],
            [str(a) for a in node_addresses or []],
            str(service_cidr or ""),
            str(pod_cidr or ""),
        )
    except metallb.MetallbConfigError as err:
        return [str(err)]


def load_balancer_problems(values: t.Any, provider: t.Any = "") -> list[str]:
    """The slurm chart's Services of type LoadBalancer that no provider would serve."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy import metallb

    if not isinstance(values, dict):
        raise AnsibleFilterError("load_balancer_problems: expected the slurm chart's values")
    return metallb.load_balancer_problems(values, str(provider or ""))


def login_address_problems(values: t.Any, pools: t.Any = None) -> list[str]:
    """The login sets' addresses that no pool of metallb_address_pools holds."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy import metallb

    if not isinstance(values, dict) or not isinstance(pools or [], list):
        raise AnsibleFilterError(
            "login_address_problems: expected the chart values (a mapping) and "
            "metallb_address_pools (a list)"
        )
    try:
        return metallb.login_address_problems(values, pools or [])
    except metallb.MetallbConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def slurm_cluster_directory_objects(
    settings: t.Any, bind_password: t.Any = "", namespace: str = "slurm"
) -> list[dict[str, t.Any]]:
    """The directory client's Secret and the nsswitch.conf ConfigMap of the Slurm pods."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
        directory_objects,
    )

    if not isinstance(settings, dict):
        raise AnsibleFilterError(
            "slurm_cluster_directory_objects: expected the role's settings as a mapping"
        )
    try:
        return directory_objects(settings, str(bind_password or ""), str(namespace))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def _objects(name: str, objects: t.Any) -> list[dict[str, t.Any]]:
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise AnsibleFilterError(
            f"{name}: expected a list of Kubernetes objects (k8s_info resources)"
        )
    return objects


def slurm_login_sets_not_ready(deployments: t.Any, expected: t.Any = 0) -> list[str]:
    """The login sets whose pods are not all ready, and how many have no Deployment yet."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_login import (
        login_sets_not_ready,
    )

    return login_sets_not_ready(_objects("slurm_login_sets_not_ready", deployments), int(expected))


def slurm_login_services_pending(services: t.Any) -> list[str]:
    """The login Services of type LoadBalancer that have no address yet."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_login import (
        login_services_pending,
    )

    return login_services_pending(_objects("slurm_login_services_pending", services))


def slurm_login_addresses(services: t.Any) -> dict[str, dict[str, t.Any]]:
    """How each login Service is reached."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_login import (
        login_addresses,
    )

    return login_addresses(_objects("slurm_login_addresses", services))


def _pools(name: str, pools: t.Any) -> dict[str, t.Any]:
    if not isinstance(pools, dict):
        raise AnsibleFilterError(f"{name}: expected slurm_cluster_pools (a mapping)")
    return pools


def _bridge(name: str, pools: t.Any) -> BridgePool:
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
        NO_BRIDGE_POOL,
        bridge_pool,
    )

    try:
        bridge = bridge_pool(_pools(name, pools))
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None
    if bridge is None:
        raise AnsibleFilterError(NO_BRIDGE_POOL)
    return bridge


def slurm_bridge_pool(pools: t.Any) -> dict[str, t.Any]:
    """The pool of kind bridge: its name, partition, node mode and node selector."""
    bridge = _bridge("slurm_bridge_pool", pools)
    return {
        "name": bridge.name,
        "partition": bridge.partition,
        "nodes": bridge.mode,
        "node_selector": dict(bridge.node_selector),
    }


def slurm_bridge_problems(
    pools: t.Any, nodes: t.Any, kubernetes_version: t.Any, slurm_nodes: t.Any = None
) -> list[str]:
    """What stops slurm-bridge before any change, one sentence each."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
        bridge_problems,
    )

    return bridge_problems(
        _pools("slurm_bridge_problems", pools),
        _objects("slurm_bridge_problems", nodes),
        str(kubernetes_version),
        [str(n) for n in slurm_nodes or []],
    )


def slurm_bridge_node_marks(pools: t.Any, nodes: t.Any) -> dict[str, dict[str, dict[str, str]]]:
    """The labels and annotations each of the bridge's Kubernetes nodes needs, and those of
    the lendable pools (a Slurm name label the bridge never takes for a Slurm node's)."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
        node_marks,
    )

    bridge = _bridge("slurm_bridge_node_marks", pools)
    lendable = [
        {str(k): str(v) for k, v in (pool.get("node_selector") or {}).items()}
        for pool in _pools("slurm_bridge_node_marks", pools).values()
        if isinstance(pool, dict) and pool.get("kind") == "lendable" and pool.get("node_selector")
    ]
    return node_marks(bridge, _objects("slurm_bridge_node_marks", nodes), lendable)


def slurm_bridge_token_rollout_schedule(
    enabled: t.Any, image: t.Any, every_min: t.Any, lifetime: t.Any
) -> str:
    """The schedule of the CronJob that replaces the bridge's pods after each renewal of its
    token ('' when turned off)."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
        token_rollout_schedule,
    )

    try:
        return token_rollout_schedule(bool(enabled), str(image or ""), every_min, lifetime)
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def metallb_resources(pools: t.Any, namespace: str = "metallb-system") -> list[dict[str, t.Any]]:
    """The IPAddressPool and L2Advertisement of each checked pool."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy import metallb

    if not isinstance(pools, list) or not all(isinstance(p, dict) for p in pools):
        raise AnsibleFilterError(
            "metallb_resources: expected metallb_address_pools, a list of mappings"
        )
    return metallb.metallb_resources(pools, str(namespace))


def slurm_cluster_autoscaling(
    settings: t.Any, nodes: t.Any = None, release: str = "slurm", namespace: str = "slurm"
) -> list[dict[str, t.Any]]:
    """The NodeSets whose pools ask for autoscaling, with partition and replica bounds, and
    where slurmctld serves the metrics that drive them (so the keda role guesses nothing)."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
        autoscaling,
        controller_metrics_url,
        nodeset_object_name,
    )

    _cluster_inputs("slurm_cluster_autoscaling", settings, nodes)
    try:
        scaled = autoscaling(settings, nodes)
        values = settings.get("values") or {}
        metrics_url = controller_metrics_url(release, namespace, values) if scaled else ""
    except ConfigError as err:
        raise AnsibleFilterError(str(err)) from None
    return [
        {
            **entry,
            "name": nodeset_object_name(release, entry["nodeset"]),
            "namespace": namespace,
            "metrics_url": metrics_url,
        }
        for entry in scaled
    ]


def slinky_release(version: t.Any = None, variable: str = "slinky_version") -> dict[str, str]:
    """The Slinky release a site pins (empty: the newest supported), with its line's defaults."""
    try:
        return resolve(version, variable)
    except ReleaseError as err:
        raise AnsibleFilterError(str(err)) from None


def slinky_version_problems(versions: t.Any) -> list[str]:
    """Why a site's Slinky chart versions cannot be deployed together; [] when they can."""
    if not isinstance(versions, dict) or set(versions) - set(VERSION_VARIABLES):
        raise AnsibleFilterError(
            f"slinky_version_problems: expected a mapping of {', '.join(VERSION_VARIABLES)}"
        )
    return version_problems(versions)


def slinky_upgrade_report(
    installed: t.Any,
    wanted: t.Any,
    old_values: t.Any = None,
    new_values: t.Any = None,
    nodesets: t.Any = None,
    release: str = "slurm",
    database_backup: str = "",
) -> dict[str, t.Any]:
    """What upgrading the installed Slinky charts to `wanted` changes for this site."""
    from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_upgrade import (
        upgrade_report,
    )

    if not isinstance(installed, dict):
        raise AnsibleFilterError(
            "slinky_upgrade_report: expected the installed chart versions (crds, operator, slurm)"
        )
    try:
        return upgrade_report(
            installed,
            str(wanted),
            old_values or {},
            new_values or {},
            nodesets or [],
            release,
            str(database_backup or ""),
        )
    except ReleaseError as err:
        raise AnsibleFilterError(str(err)) from None


def nodeset_rollout_pending(nodesets: t.Any, names: t.Any = False) -> list[str]:
    """The NodeSets whose rollout is not complete, each with what it lacks (or, with
    names=true, their names alone); [] when settled."""
    if not isinstance(nodesets, list) or not all(isinstance(n, dict) for n in nodesets):
        raise AnsibleFilterError(
            "nodeset_rollout_pending: expected the NodeSets as k8s_info returns them (resources)"
        )
    try:
        names_only = boolean(names, strict=True)
    except TypeError:
        raise AnsibleFilterError(
            f"nodeset_rollout_pending: expected names=true or names=false, not {names!r}"
        ) from None
    if names_only:
        return [name for name, _lacks in rollout.nodesets_rolling(nodesets)]
    return rollout.nodeset_rollout_pending(nodesets)


def statefulset_rollout_pending(statefulsets: t.Any, images: t.Any) -> list[str]:
    """The Slurm programs whose StatefulSet does not run the given image on every pod yet."""
    if not isinstance(statefulsets, list) or not all(isinstance(s, dict) for s in statefulsets):
        raise AnsibleFilterError(
            "statefulset_rollout_pending: expected the StatefulSets as k8s_info returns them"
        )
    if not isinstance(images, dict):
        raise AnsibleFilterError(
            "statefulset_rollout_pending: expected the images as a dict of program to image"
        )
    return rollout.statefulset_rollout_pending(
        statefulsets, {str(k): str(v) for k, v in images.items()}
    )


def slurm_nodes_not_back(nodes: t.Any, names: t.Any) -> list[str]:
    """The named Slurm nodes that do not take jobs yet, each with its state; [] when all do."""
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise AnsibleFilterError(
            "slurm_nodes_not_back: expected the nodes as hpcops.slinky.slurm_info returns them"
        )
    if not isinstance(names, list):
        raise AnsibleFilterError("slurm_nodes_not_back: expected a list of Slurm node names")
    return rollout.slurm_nodes_not_back(nodes, [str(name) for name in names])


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "helm_chart_args": helm_chart_args,
            "mariadb_resource": mariadb_resource,
            "mariadb_storage_problems": mariadb_storage_problems,
            "load_balancer_problems": load_balancer_problems,
            "metallb_pool_problems": metallb_pool_problems,
            "login_address_problems": login_address_problems,
            "slurm_login_sets_not_ready": slurm_login_sets_not_ready,
            "slurm_login_services_pending": slurm_login_services_pending,
            "slurm_login_addresses": slurm_login_addresses,
            "slurm_cluster_directory_objects": slurm_cluster_directory_objects,
            "metallb_resources": metallb_resources,
            "mirrored_image": mirrored_image,
            "nodeset_rollout_pending": nodeset_rollout_pending,
            "slinky_release": slinky_release,
            "slinky_upgrade_report": slinky_upgrade_report,
            "slinky_version_problems": slinky_version_problems,
            "slurm_cluster_values": slurm_cluster_values,
            "slurm_cluster_autoscaling": slurm_cluster_autoscaling,
            "slurm_cluster_storage_problems": slurm_cluster_storage_problems,
            "statefulset_rollout_pending": statefulset_rollout_pending,
            "slurm_nodes_not_back": slurm_nodes_not_back,
            "slurm_bridge_pool": slurm_bridge_pool,
            "slurm_bridge_problems": slurm_bridge_problems,
            "slurm_bridge_node_marks": slurm_bridge_node_marks,
            "slurm_bridge_token_rollout_schedule": slurm_bridge_token_rollout_schedule,
        }
