# SPDX-License-Identifier: GPL-3.0-or-later
"""Selecting nodes and jobs, on nodes and jobs recorded from a real slurmrestd."""

from __future__ import annotations

import typing as t

import pytest
from fake_slurmrestd import recording

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    SelectionError,
    expand_hostlists,
    item_query,
    job_filter,
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


# ---- job_filter: the same selection, one job at a time ------------------------------------

RUNNING = next(job for job in JOBS if job["state"] == "RUNNING")
PENDING = next(job for job in JOBS if job["state"] == "PENDING")
# A pending job may name several partitions; Slurm starts it in the first that can.
EITHER = {**PENDING, "job_id": 3, "partition": "batch,backfill"}


def passing(**filters: t.Any) -> list[int]:
    passes = job_filter(**filters)
    return [job["job_id"] for job in [RUNNING, PENDING, EITHER] if passes(job)]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, [1, 2, 3]),
        ({"partitions": ["batch"]}, [1, 3]),
        ({"partitions": ["backfill"]}, [2, 3]),
        ({"partitions": ["debug"]}, []),
        ({"partitions": ["batch,backfill"]}, []),  # a name, not a list of them
        ({"states": ["pending"]}, [2, 3]),
        ({"states": ["RUNNING", "completed"]}, [1]),
        ({"users": ["bob"]}, [2, 3]),
        ({"names": ["hpcops-running"]}, [1]),
        ({"job_ids": [2, "3"]}, [2, 3]),
        ({"nodes": ["cpu[01-02]"]}, [1]),
        ({"nodes": ["cpu03"]}, []),
        ({"partitions": ["backfill"], "states": ["pending"], "job_ids": ["3"]}, [3]),
    ],
)
def test_job_filter(filters: dict[str, t.Any], expected: list[int]) -> None:
    assert passing(**filters) == expected


def test_select_jobs_matches_a_multi_partition_job_too() -> None:
    assert select_jobs([RUNNING, PENDING, EITHER], partitions=["batch"]) == [RUNNING, EITHER]


def test_job_filter_reads_its_host_lists_once_up_front() -> None:
    with pytest.raises(SelectionError, match=r"^nodes: 'cpu\[01-' is not a valid host list"):
        job_filter(nodes=["cpu[01-"])


# ---- item_query: a JMESPath expression per item --------------------------------------------


def test_item_query_picks_fields_and_leaves_out_what_does_not_match() -> None:
    query = item_query("state == 'PENDING' && {id: job_id, reason: state_reason}", "query.jobs")
    assert [query(job) for job in JOBS] == [None, {"id": 2, "reason": "JobHeldUser"}]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("job_id", 1),
        ("hold", None),  # false: left out
        ("no_such_field", None),  # null: left out
        ("state_flags", []),  # empty, but neither null nor false: kept
        ("restart_count", 0),
        ("name == 'hpcops-running'", True),
        ("[job_id, partition]", [1, "batch"]),
    ],
)
def test_only_null_and_false_leave_an_item_out(expression: str, expected: t.Any) -> None:
    assert item_query(expression, "query.jobs")(RUNNING) == expected


def test_a_query_works_on_nodes_too() -> None:
    query = item_query("drain_state == 'drained' && name", "query.nodes")
    assert [found for found in map(query, NODES) if found is not None] == ["cpu03"]


def test_a_bad_expression_names_the_option() -> None:
    with pytest.raises(SelectionError) as err:
        item_query("state == ", "query.jobs")
    assert str(err.value).startswith(
        "query.jobs: 'state == ' is not a JMESPath expression (Invalid jmespath expression: "
        "Incomplete expression:"
    )


def test_the_example_of_a_bad_expression_is_a_jmespath_expression() -> None:
    with pytest.raises(SelectionError) as err:
        item_query("state == ", "query.jobs")
    assert str(err.value).endswith(
        "); for example \"state == 'PENDING' && {id: job_id, partition: partition}\""
    )


def test_an_expression_that_fails_on_an_item_names_the_option() -> None:
    query = item_query("length(job_id)", "query.jobs")
    with pytest.raises(
        SelectionError, match=r"^query\.jobs: 'length\(job_id\)' fails on an item: In function"
    ):
        query(RUNNING)
