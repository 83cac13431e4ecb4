# SPDX-License-Identifier: GPL-3.0-or-later
"""What node_preflight_facts makes of a host's files, from files recorded on real hosts
(fixtures/preflight/host: this project's Debian 12 machine, a cgroup v1 hybrid)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.hpcops.slinky.plugins.module_utils._preflight.host_facts import (
    cgroup_mode,
    enabled_v1_controllers,
    fstab_swap_entries,
    mount_types,
    swap_devices,
)

HOST = Path(__file__).resolve().parents[3] / "fixtures/preflight/host"


def test_the_hybrid_hierarchy_of_a_cgroup_v1_machine() -> None:
    types = mount_types((HOST / "debian12-vm-mounts.txt").read_text())
    assert types["/sys/fs/cgroup"] == "tmpfs"
    assert cgroup_mode(types) == "hybrid"
    controllers = enabled_v1_controllers((HOST / "debian12-vm-cgroups.txt").read_text())
    assert {"cpu", "cpuset", "memory", "pids"} <= set(controllers)


def test_unified_and_legacy_hierarchies() -> None:
    assert cgroup_mode(mount_types("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n")) == "unified"
    legacy = (
        "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
    )
    assert cgroup_mode(mount_types(legacy)) == "legacy"
    assert cgroup_mode({}) == "none"


def test_a_mount_point_with_a_space() -> None:
    assert mount_types("server:/x /srv/my\\040data nfs4 rw 0 0\n") == {"/srv/my data": "nfs4"}


def test_swap_from_proc_and_fstab() -> None:
    proc = (
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
        "/swapfile                               file\t\t4194300\t\t0\t\t-2\n"
    )
    assert swap_devices(proc) == [{"name": "/swapfile", "size_kib": 4194300}]
    assert swap_devices("Filename Type Size Used Priority\n") == []
    fstab = "UUID=1 / ext4 defaults 0 1\n/swapfile none swap sw 0 0\n# /dev/sdb2 none swap sw 0 0\n"
    assert fstab_swap_entries(fstab) == ["/swapfile"]
