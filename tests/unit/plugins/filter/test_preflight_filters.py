# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight filters as playbooks call them: settings from role variables, errors that
name what is wrong."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.preflight import (
    node_preflight,
    node_preflight_report,
    node_prep_inventory_problems,
    node_prep_sysctl_values,
)


def test_sysctl_values_keep_a_higher_host_value_and_drop_nulls() -> None:
    wanted = {"net.ipv4.ip_forward": "1", "fs.inotify.max_user_watches": ">=524288", "vm.x": None}
    assert node_prep_sysctl_values(wanted, {"fs.inotify.max_user_watches": "1048576"}) == {
        "net.ipv4.ip_forward": "1",
        "fs.inotify.max_user_watches": "1048576",
    }
    assert (
        node_prep_sysctl_values(wanted, {"fs.inotify.max_user_watches": "8192"})[
            "fs.inotify.max_user_watches"
        ]
        == "524288"
    )


def test_node_preflight_reads_role_settings() -> None:
    config = {
        "pools": {"cpu": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "cpu"}}},
        "groups": {"slinky_nodes": ["c1"], "slinky_pool_cpu": ["c1"]},
        "prefix": "slinky_pool_",
        "node_names": {"c1": "c1.example.org"},
        "sysctls": {"net.ipv4.ip_forward": "1", "vm.x": None},
        "mtu": "0",
        "slurm_uid": "401",
    }
    results = node_preflight({"c1": {}}, [], config)
    assert results[0]["host"] == "(site)" and results[0]["status"] == "skip"
    assert results[1:] == [
        {
            "host": "c1",
            "check": "host.reachable",
            "severity": "fail",
            "status": "fail",
            "found": "unreachable, or its facts could not be read",
            "expected": "the host answers over its Ansible connection, with Python",
            "fix": "see the Read the host task's error for this host",
        }
    ]
    assert node_preflight_report(results)["failed_hosts"] == ["c1"]


def test_node_preflight_refuses_a_host_outside_the_pools() -> None:
    config = {"pools": {"cpu": {}}, "groups": {}, "prefix": "slinky_pool_"}
    with pytest.raises(AnsibleFilterError, match="host x is in no pool group"):
        node_preflight({"x": {}}, [], config)


def test_inventory_problems_filter() -> None:
    problems = node_prep_inventory_problems(
        {"slinky_nodes": ["a"], "slinky_pool_cpu": []},
        {"pools": {"cpu": {}}, "prefix": "slinky_pool_", "node_group": "slinky_nodes"},
    )
    assert problems == [
        "host a is in group slinky_nodes but in no pool group: put it in one of slinky_pool_cpu"
    ]
