# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""MetalLB's address pools for a bare-metal site, checked before any change (pure).

PRIVATE to the collection: names here can change without notice.

A bare-metal cluster has no provider for Services of type LoadBalancer: without one, the
login nodes' Service stays pending forever. MetalLB in L2 mode answers ARP (IPv4) or NDP
(IPv6) for the addresses of its pools on the nodes' own network, so a pool must lie inside a
network the nodes are on, and must hold no node's address, no address of the cluster's
service or pod ranges, and no address of another pool: MetalLB would hand out an address
that another machine already answers for, and the clash shows only as lost connections.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence

API_VERSION = "metallb.io/v1beta1"
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MANAGED_BY = "hpcops.slinky"
# The address a Service asks of MetalLB's pools (v0.13 and later).
ADDRESS_ANNOTATION = "metallb.universe.tf/loadBalancerIPs"
POOL_KEYS = frozenset({"name", "addresses", "auto_assign", "avoid_buggy_ips", "l2_interfaces"})


class MetallbConfigError(ValueError):
    """A setting of the metallb role that cannot work: the variable, what, and the fix."""

    def __init__(self, variable: str, problem: str, fix: str) -> None:
        super().__init__(f"{variable}: {problem}; {fix}")


def require_netaddr() -> t.Any:
    """The netaddr library. Imported here, not at the top: Ansible imports every filter file
    of the collection in each task's worker process, and few tasks compare addresses."""
    try:
        import netaddr  # noqa: PLC0415
    except ImportError:
        raise MetallbConfigError(
            "metallb_address_pools",
            "the Python library netaddr is missing on the controller",
            "pip install -r requirements.txt (netaddr)",
        ) from None
    return netaddr


def address_set(text: str, variable: str) -> t.Any:
    """'192.0.2.240/28' or '192.0.2.240-192.0.2.250' as a netaddr IPSet; a bare address is
    a /32 (or /128). MetalLB takes both forms."""
    netaddr = require_netaddr()
    value = str(text).strip()
    try:
        if "-" in value:
            first, last = (part.strip() for part in value.split("-", 1))
            span = netaddr.IPRange(first, last)
            if netaddr.IPAddress(first).version != netaddr.IPAddress(last).version:
                raise ValueError("mixed address families")
            return netaddr.IPSet(span)
        return netaddr.IPSet([netaddr.IPNetwork(value).cidr])
    except (netaddr.AddrFormatError, ValueError, TypeError) as err:
        raise MetallbConfigError(
            variable,
            f"{value!r} is not an address range ({err})",
            "give a CIDR such as 192.0.2.240/28 or a range such as 192.0.2.240-192.0.2.250",
        ) from None


def _networks(values: t.Any, variable: str) -> list[t.Any]:
    netaddr = require_netaddr()
    found = []
    for index, value in enumerate(values or []):
        try:
            found.append(netaddr.IPNetwork(str(value)).cidr)
        except (netaddr.AddrFormatError, ValueError, TypeError):
            raise MetallbConfigError(
                f"{variable}[{index}]",
                f"{value!r} is not a network",
                "give a CIDR such as 192.0.2.0/24",
            ) from None
    return found


def _shown(addresses: t.Any) -> str:
    """An IPSet as the ranges it holds, the first four of them."""
    cidrs = addresses.iter_cidrs()
    return ", ".join(str(cidr) for cidr in cidrs[:4]) + (", ..." if len(cidrs) > 4 else "")


def _reserved(service_cidr: str, pod_cidr: str, problems: list[str]) -> list[tuple[str, t.Any]]:
    """The cluster's own ranges, which no pool may overlap."""
    reserved = []
    for variable, kind, cidr in (
        ("metallb_service_cidr", "service", service_cidr),
        ("metallb_pod_cidr", "pod", pod_cidr),
    ):
        if str(cidr or "").strip():
            try:
                reserved.append(
                    (f"the cluster's {kind} range ({variable})", address_set(cidr, variable))
                )
            except MetallbConfigError as err:
                problems.append(str(err))
    return reserved


def _node_set(node_addresses: Sequence[str]) -> t.Any:
    netaddr = require_netaddr()
    nodes = netaddr.IPSet()
    for address in node_addresses:
        try:
            nodes.add(netaddr.IPAddress(str(address)))
        except (netaddr.AddrFormatError, ValueError):
            continue  # a Node's hostname entry, not an address
    return nodes


def _entry_problems(where: str, pool: Mapping[str, t.Any], names: dict[str, int]) -> list[str]:
    """The pool's keys and name."""
    problems = []
    unknown = sorted(set(pool) - POOL_KEYS)
    if unknown:
        problems.append(
            f"{where}: unknown keys {', '.join(unknown)}; the keys are "
            f"{', '.join(sorted(POOL_KEYS))}"
        )
    name = str(pool.get("name") or "")
    if not NAME_RE.match(name):
        problems.append(
            f"{where}.name: {name!r} is not a Kubernetes name; use lower-case letters, digits and -"
        )
    elif name in names:
        problems.append(
            f"{where}.name: {name} is also metallb_address_pools[{names[name]}]'s; give each "
            "pool its own name"
        )
    return problems


def _range_problems(
    variable: str,
    text: str,
    part: t.Any,
    networks: list[t.Any],
    nodes: t.Any,
    reserved: list[tuple[str, t.Any]],
) -> list[str]:
    """One range of a pool against the nodes' networks and addresses and the reserved ranges."""
    netaddr = require_netaddr()
    problems = []
    if networks and not any(part.issubset(netaddr.IPSet([n])) for n in networks):
        problems.append(
            f"{variable}: {text} is not inside the nodes' networks "
            f"({', '.join(str(n) for n in networks)}): in L2 mode no node would answer for it; "
            "take addresses of the nodes' own network, or add the network to "
            "metallb_node_networks if the nodes are on it"
        )
    clash = part & nodes
    if clash:
        problems.append(
            f"{variable}: {text} holds node addresses ({_shown(clash)}); leave the nodes' "
            "addresses out of the pool"
        )
    for what, other in reserved:
        overlap = part & other
        if overlap:
            problems.append(
                f"{variable}: {text} overlaps {what} ({_shown(overlap)}); take addresses outside it"
            )
    return problems


def address_pool_problems(
    pools: t.Any,
    node_networks: t.Any,
    node_addresses: Sequence[str],
    service_cidr: str = "",
    pod_cidr: str = "",
) -> list[str]:
    """Every problem of metallb_address_pools, each naming the variable and the fix.

    ``node_networks``: the networks the nodes' L2 segment spans (metallb_node_networks);
    ``node_addresses``: the Nodes' InternalIP and ExternalIP addresses."""
    if not isinstance(pools, list) or not pools:
        return [
            "metallb_address_pools: no address pool; give at least one, for example "
            "[{name: site, addresses: ['192.0.2.240/28']}], of addresses on the nodes' network "
            "that no machine uses"
        ]
    try:
        netaddr = require_netaddr()
        networks = _networks(node_networks, "metallb_node_networks")
    except MetallbConfigError as err:
        return [str(err)]
    problems: list[str] = []
    if not networks:
        problems.append(
            "metallb_node_networks: not set; give the networks of the nodes' L2 segment "
            "(for example ['192.0.2.0/24']): MetalLB's L2 mode answers for a pool's addresses "
            "there only"
        )
    reserved = _reserved(service_cidr, pod_cidr, problems)
    nodes = _node_set(node_addresses)
    names: dict[str, int] = {}
    taken: list[tuple[str, t.Any]] = []
    for index, pool in enumerate(pools):
        where = f"metallb_address_pools[{index}]"
        if not isinstance(pool, Mapping):
            problems.append(f"{where}: not a mapping; give {{name: ..., addresses: [...]}}")
            continue
        problems += _entry_problems(where, pool, names)
        name = str(pool.get("name") or "")
        names.setdefault(name, index)
        addresses = pool.get("addresses")
        if not isinstance(addresses, list) or not addresses:
            problems.append(f"{where}.addresses: none; give a list of CIDRs or ranges")
            continue
        pool_set = netaddr.IPSet()
        for position, text in enumerate(addresses):
            variable = f"{where}.addresses[{position}]"
            try:
                part = address_set(text, variable)
            except MetallbConfigError as err:
                problems.append(str(err))
                continue
            problems += _range_problems(variable, text, part, networks, nodes, reserved)
            pool_set |= part
        for other_name, other in taken:
            overlap = pool_set & other
            if overlap:
                problems.append(
                    f"{where}: its addresses overlap pool {other_name}'s ({_shown(overlap)}); "
                    "give each address to one pool"
                )
        taken.append((name, pool_set))
    return problems


def metallb_resources(
    pools: Sequence[Mapping[str, t.Any]], namespace: str
) -> list[dict[str, t.Any]]:
    """The IPAddressPool and L2Advertisement of each pool (checked pools in)."""
    resources: list[dict[str, t.Any]] = []
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY}
    for pool in pools:
        name = str(pool["name"])
        spec: dict[str, t.Any] = {
            "addresses": [str(a).strip() for a in pool["addresses"]],
            "autoAssign": bool(pool.get("auto_assign", True)),
            "avoidBuggyIPs": bool(pool.get("avoid_buggy_ips", False)),
        }
        resources.append(
            {
                "apiVersion": API_VERSION,
                "kind": "IPAddressPool",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": spec,
            }
        )
        advertisement: dict[str, t.Any] = {"ipAddressPools": [name]}
        if pool.get("l2_interfaces"):
            advertisement["interfaces"] = [str(i) for i in pool["l2_interfaces"]]
        resources.append(
            {
                "apiVersion": API_VERSION,
                "kind": "L2Advertisement",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": advertisement,
            }
        )
    return resources


def load_balancer_services(values: Mapping[str, t.Any]) -> list[str]:
    """The slurm chart's Services of type LoadBalancer in these values: a login set's, unless
    its type is set otherwise (both lines' charts default it to LoadBalancer), and the
    controller's, slurmrestd's or slurmdbd's where the values ask for it."""
    found = []
    for section in ("controller", "restapi", "accounting"):
        part = values.get(section) or {}
        spec = (part.get("service") or {}).get("spec") or {}
        if spec.get("type") == "LoadBalancer" and part.get("enabled", True):
            found.append(f"{section}.service")
    for name, given in sorted((values.get("loginsets") or {}).items()):
        loginset = given or {}
        if not loginset.get("enabled", True):
            continue
        spec = (loginset.get("service") or {}).get("spec") or {}
        if spec.get("type", "LoadBalancer") == "LoadBalancer":
            found.append(f"loginsets.{name}.service")
    return found


def load_balancer_problems(values: Mapping[str, t.Any], provider: str) -> list[str]:
    """A Service of type LoadBalancer on a cluster with no provider for it stays pending with
    no address: refused before any change, naming the Service and the three ways out."""
    if str(provider or "").strip():
        return []
    problems = []
    for service in load_balancer_services(values):
        if service.startswith("loginsets."):
            name = service.split(".")[1]
            where, node_port = (
                f"slurm_cluster_login_sets.{name}.service.type",
                "service.type NodePort",
            )
        else:
            where, node_port = f"slurm_cluster_values: {service}.spec.type", "spec.type NodePort"
        problems.append(
            f"{where}: the Service is of type LoadBalancer, but the cluster has no provider for "
            "it, so it would stay pending with no address (a bare-metal cluster has none of its "
            "own, and Slinky ignores externalIPs); add metallb to slinky_components with "
            f"metallb_address_pools, set {node_port}, or, where the site runs a load balancer "
            "of its own, set slinky_load_balancer_provider to its name"
        )
    return problems


def login_address_problems(
    values: Mapping[str, t.Any], pools: Sequence[Mapping[str, t.Any]]
) -> list[str]:
    """A login set's address that no MetalLB pool holds would leave its Service pending."""
    problems = []
    for name, loginset in sorted((values.get("loginsets") or {}).items()):
        service = loginset.get("service") or {}
        address = ((service.get("metadata") or {}).get("annotations") or {}).get(ADDRESS_ANNOTATION)
        if not address or not loginset.get("enabled", True):
            continue
        wanted = address_set(str(address), f"slurm_cluster_login_sets.{name}.service.address")
        for index, pool in enumerate(pools):
            for entry in pool.get("addresses") or []:
                wanted -= address_set(str(entry), f"metallb_address_pools[{index}].addresses")
        if wanted:
            problems.append(
                f"slurm_cluster_login_sets.{name}.service.address: {address} is in no pool of "
                "metallb_address_pools, so MetalLB would never give it; pick an address of a pool "
                "or add one"
            )
    return problems
