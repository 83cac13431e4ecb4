# SPDX-License-Identifier: GPL-3.0-or-later
"""Selecting nodes and jobs, on nodes and jobs recorded from a real slurmrestd."""

from __future__ import annotations

import pytest
from fake_slurmrestd import recording

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    SelectionError,
    expand_hostlists,
    select_jobs,
    select_nodes,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    normalize_job,
    normalize_node,
)

NODES = [normalize_node(raw) for raw in recording("26.05", "v0.0.44", "nodes")[1]["nodes"]]
JOBS = [normalize_job(raw) for raw in recording("26.05", "v0.0.44", "jobs")[1]["jobs"]]


def names(items: list[dict]) -> list[str]:
    return [item["name"] for item in items]


def test_expand_keeps_order_and_drops_repeats() -> None:
    assert expand_hostlists(["cpu[02-03]", "cpu01", "cpu02"], "nodes") == [
        "cpu02",
        "cpu03",
        "cpu01",
    ]


def test_a_bad_host_list_names_the_option() -> None:
    with pytest.raises(SelectionError, match=r"^names: 'cpu\[01-' is not a valid host list"):
        expand_hostlists(["cpu[01-"], "names")


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["idle"], ["cpu02", "cpu03"]),
        (["drain"], ["cpu03"]),
        (["drained"], ["cpu03"]),
        (["draining"], []),
        (["mixed", "allocated"], ["cpu01"]),
    ],
)
def test_select_nodes_by_state(states: list[str], expected: list[str]) -> None:
    assert names(select_nodes(NODES, states=states)) == expected


def test_select_nodes_by_host_list_and_partition() -> None:
    assert names(select_nodes(NODES, names=["cpu[01-02]"], partitions=["backfill"])) == [
        "cpu01",
        "cpu02",
    ]
    assert select_nodes(NODES, partitions=["gpu"]) == []


def test_select_jobs_by_node_partition_state_and_user() -> None:
    running = next(job for job in JOBS if job["state"] == "RUNNING")
    pending = next(job for job in JOBS if job["state"] == "PENDING")
    assert [job["job_id"] for job in select_jobs(JOBS, nodes=["cpu[01-02]"])] == [running["job_id"]]
    assert [job["state"] for job in select_jobs(JOBS, partitions=["backfill"])] == ["PENDING"]
    assert [job["user_name"] for job in select_jobs(JOBS, states=["running", "pending"])] == [
        "alice",
        "bob",
    ]
    assert select_jobs(JOBS, users=["alice"], states=["PENDING"]) == []
    assert select_jobs(JOBS, job_ids=[str(pending["job_id"])]) == [pending]
