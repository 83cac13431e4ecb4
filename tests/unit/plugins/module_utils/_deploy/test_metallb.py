# SPDX-License-Identifier: GPL-3.0-or-later
"""MetalLB's address pools checked before any change, and the resources made of them."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.metallb import (
    address_pool_problems,
    load_balancer_problems,
    load_balancer_services,
    metallb_resources,
)

NODES = ["192.0.2.10", "192.0.2.11", "192.0.2.12", "kind-worker"]
NETWORKS = ["192.0.2.0/24"]


def problems(pools: t.Any, **kwargs: t.Any) -> list[str]:
    settings = {"node_networks": NETWORKS, "node_addresses": NODES, **kwargs}
    return address_pool_problems(pools, **settings)


def test_pools_on_the_nodes_network_away_from_every_used_address_pass() -> None:
    pools = [
        {"name": "login", "addresses": ["192.0.2.240/29"]},
        {"name": "services", "addresses": ["192.0.2.248-192.0.2.250", "192.0.2.251"]},
    ]
    assert problems(pools, service_cidr="10.96.0.0/16", pod_cidr="10.244.0.0/16") == []


@pytest.mark.parametrize(
    ("pools", "kwargs", "said"),
    [
        (
            [],
            {},
            "metallb_address_pools: no address pool; give at least one",
        ),
        (
            [{"name": "login", "addresses": ["198.51.100.0/28"]}],
            {},
            "metallb_address_pools[0].addresses[0]: 198.51.100.0/28 is not inside the nodes' "
            "networks (192.0.2.0/24): in L2 mode no node would answer for it",
        ),
        (
            [{"name": "login", "addresses": ["192.0.2.8-192.0.2.15"]}],
            {},
            "metallb_address_pools[0].addresses[0]: 192.0.2.8-192.0.2.15 holds node addresses "
            "(192.0.2.10/31, 192.0.2.12/32); leave the nodes' addresses out of the pool",
        ),
        (
            [{"name": "login", "addresses": ["10.96.0.240/28"]}],
            {"node_networks": ["10.96.0.0/12"], "service_cidr": "10.96.0.0/16"},
            "metallb_address_pools[0].addresses[0]: 10.96.0.240/28 overlaps the cluster's "
            "service range (metallb_service_cidr) (10.96.0.240/28); take addresses outside it",
        ),
        (
            [
                {"name": "a", "addresses": ["192.0.2.240/28"]},
                {"name": "b", "addresses": ["192.0.2.250-192.0.2.251"]},
            ],
            {},
            "metallb_address_pools[1]: its addresses overlap pool a's (192.0.2.250/31); give "
            "each address to one pool",
        ),
        (
            [{"name": "Login", "addresses": ["192.0.2.240/28"]}],
            {},
            "metallb_address_pools[0].name: 'Login' is not a Kubernetes name",
        ),
        (
            [{"name": "login", "addresses": ["192.0.2.300/28"]}],
            {},
            "metallb_address_pools[0].addresses[0]: '192.0.2.300/28' is not an address range",
        ),
        (
            [{"name": "login", "addresses": ["192.0.2.240/28"], "autoassign": False}],
            {},
            "metallb_address_pools[0]: unknown keys autoassign; the keys are addresses, "
            "auto_assign, avoid_buggy_ips, l2_interfaces, name",
        ),
        (
            [{"name": "login", "addresses": ["192.0.2.240/28"]}],
            {"node_networks": []},
            "metallb_node_networks: not set; give the networks of the nodes' L2 segment",
        ),
    ],
)
def test_a_pool_that_cannot_work_is_named_with_its_fix(
    pools: t.Any, kwargs: dict[str, t.Any], said: str
) -> None:
    found = problems(pools, **kwargs)
    assert any(p.startswith(said) for p in found), found


def test_the_resources_are_one_pool_and_one_l2_advertisement_each() -> None:
    pools = [{"name": "login", "addresses": [" 192.0.2.240/29"], "l2_interfaces": ["eth0"]}]
    pool, advertisement = metallb_resources(pools, "metallb-system")
    assert pool == {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {
            "name": "login",
            "namespace": "metallb-system",
            "labels": {"app.kubernetes.io/managed-by": "hpcops.slinky"},
        },
        "spec": {"addresses": ["192.0.2.240/29"], "autoAssign": True, "avoidBuggyIPs": False},
    }
    assert advertisement["kind"] == "L2Advertisement"
    assert advertisement["spec"] == {"ipAddressPools": ["login"], "interfaces": ["eth0"]}


def test_a_login_service_of_the_charts_default_type_needs_a_provider() -> None:
    values = {
        "restapi": {"service": {"spec": {"type": "LoadBalancer"}}},
        "accounting": {"enabled": False, "service": {"spec": {"type": "LoadBalancer"}}},
        "loginsets": {
            "team-a": {"enabled": True},  # the charts' default: LoadBalancer
            "team-b": {"service": {"spec": {"type": "NodePort"}}},
            "slinky": {"enabled": False},
        },
    }
    assert load_balancer_services(values) == ["restapi.service", "loginsets.team-a.service"]
    problems = load_balancer_problems(values, "")
    assert len(problems) == 2
    assert problems[1].startswith(
        "slurm_cluster_login_sets.team-a.service.type: the Service is of type LoadBalancer, "
        "but the cluster has no provider for it, so it would stay pending with no address"
    )
    assert problems[0].startswith("slurm_cluster_values: restapi.service.spec.type: the Service")
    assert "add metallb to slinky_components" in problems[1]
    assert "set slinky_load_balancer_provider" in problems[1]
    assert load_balancer_problems(values, "metallb") == []
    assert load_balancer_problems({"loginsets": {"slinky": {"enabled": False}}}, "") == []
