# SPDX-License-Identifier: GPL-3.0-or-later
"""The lending report's sums: hours lent, hours used on lent nodes, jobs a reclaim ended."""

from __future__ import annotations

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.lending import (
    Job,
    LendingReport,
    Loan,
    job_from_api,
    prometheus_text,
    table_lines,
)

H = 3600.0
# A day; int01 lent from 02:00, reclaimed at 10:00, back at 10:00:30; int02 lent from 20:00
# to past the period's end; int03 never lent.
LOANS = [
    Loan("int01", "backfill", lent=2 * H, reclaim=10 * H, returned=10 * H + 30),
    Loan("int02", "backfill", lent=20 * H),
]


def report(*jobs: Job) -> dict[tuple[str, str], tuple[float, ...]]:
    built = LendingReport(0.0, 24 * H, LOANS)
    for job in jobs:
        built.add_job(job)
    return {
        (row.partition, row.account): (
            round(row.lent_node_hours, 3),
            round(row.used_node_hours, 3),
            row.jobs_on_lent_nodes,
            row.requeued_by_reclaim,
            row.cancelled_by_reclaim,
            round(row.lost_node_hours, 3),
        )
        for row in built.table()
    }


def test_hours_lent_count_within_the_period_only() -> None:
    # int01: 8 h 30 s; int02: 4 h until the period ends.
    assert report() == {("backfill", "*"): (12.008, 0.0, 0, 0, 0, 0.0)}


def test_a_job_counts_only_the_hours_its_nodes_were_lent() -> None:
    job = Job(1, "backfill", "astro", ("int01", "int03"), start=1 * H, end=5 * H, state="COMPLETED")
    assert report(job)[("backfill", "astro")] == (0.0, 3.0, 1, 0, 0, 0.0)


def test_a_job_a_reclaim_ended_is_counted_with_the_work_it_lost() -> None:
    requeued = Job(
        2, "backfill", "astro", ("int01",), start=8 * H, end=10 * H + 20, state="REQUEUED"
    )
    cancelled = Job(
        3, "backfill", "hep", ("int01",), start=9 * H, end=10 * H + 25, state="CANCELLED"
    )
    finished = Job(4, "backfill", "hep", ("int01",), start=3 * H, end=4 * H, state="CANCELLED")
    rows = report(requeued, cancelled, finished)
    assert rows[("backfill", "astro")] == (0.0, 2.006, 1, 1, 0, 2.006)
    # The job cancelled at 04:00 was not the reclaim's doing.
    assert rows[("backfill", "hep")] == (0.0, 2.007, 2, 0, 1, 1.007)


def test_jobs_still_running_and_jobs_elsewhere() -> None:
    running = Job(5, "backfill", "astro", ("int02",), start=23 * H, end=None, state="RUNNING")
    elsewhere = Job(6, "batch", "astro", ("cpu01",), start=1 * H, end=2 * H, state="COMPLETED")
    pending = Job(7, "backfill", "astro", ("int02",), start=None, end=None, state="PENDING")
    assert report(running, elsewhere, pending) == {
        ("backfill", "*"): (12.008, 0.0, 0, 0, 0, 0.0),
        ("backfill", "astro"): (0.0, 1.0, 1, 0, 0, 0.0),
    }


def test_the_period_must_be_a_period() -> None:
    with pytest.raises(ValueError, match="end after it starts"):
        LendingReport(10.0, 10.0, LOANS)


def test_prometheus_text_has_a_series_per_partition_and_account() -> None:
    built = LendingReport(0.0, 24 * H, LOANS)
    built.add_job(
        Job(1, "backfill", 'as"tro', ("int01",), start=2 * H, end=3 * H, state="COMPLETED")
    )
    text = prometheus_text(built.table())
    assert 'hpcops_lending_lent_node_hours{partition="backfill",account="*"} 12.0083' in text
    assert 'hpcops_lending_used_node_hours{partition="backfill",account="as\\"tro"} 1' in text
    assert "# TYPE hpcops_lending_lost_node_hours gauge" in text
    assert 'lent_node_hours{partition="backfill",account="as' not in text


# Two job records as slurmrestd 26.05 (v0.0.45) returned them from the lab's slurmdbd, cut to
# the fields the report reads (the first with a second node added): one that ran, one held
# and cancelled before it started.
RECORDED_JOB = {
    "job_id": 14,
    "partition": "batch",
    "account": "lab",
    "nodes": "cpu[01-02]",
    "state": {"current": ["COMPLETED"], "reason": "None"},
    "time": {"elapsed": 2, "end": 1795829383, "start": 1795829381},
}
NEVER_RAN = {
    "job_id": 15,
    "partition": "batch",
    "account": "lab",
    "nodes": "None assigned",
    "state": {"current": ["CANCELLED"], "reason": "None"},
    "time": {"start": 4294967294, "end": 1795829988, "elapsed": 0},
}


# The attempt a requeue ended, as slurmdbd answered (Slurm 26.05 lab, v0.0.44; sacct shows
# it REQUEUED, from 05:29:24 to 05:29:27 on cpu01).
REQUEUED_ATTEMPT = {
    "job_id": 4,
    "partition": "batch",
    "account": "lab",
    "nodes": "cpu01",
    "state": {"current": ["PENDING", "REQUEUED"], "reason": "None"},
    "time": {"start": 1795843764, "end": 1795843767, "elapsed": 3},
}


def test_an_attempt_a_requeue_ended_is_requeued_as_sacct_says() -> None:
    assert job_from_api(REQUEUED_ATTEMPT).state == "REQUEUED"


def test_jobs_read_from_slurmdbd() -> None:
    assert job_from_api(RECORDED_JOB) == Job(
        14, "batch", "lab", ("cpu01", "cpu02"), 1795829381.0, 1795829383.0, "COMPLETED"
    )
    never = job_from_api(NEVER_RAN)
    assert never.nodes == () and never.start is None and never.state == "CANCELLED"


def test_the_table_has_a_header_and_one_aligned_line_per_row() -> None:
    built = LendingReport(0.0, 24 * H, LOANS)
    built.add_job(Job(7, "backfill", "physics", ("int01",), 3 * H, 5 * H, "COMPLETED"))
    lines = table_lines(built.table())
    assert lines[0].split() == [
        "PARTITION", "ACCOUNT", "LENT_NH", "USED_NH", "JOBS", "REQUEUED", "CANCELLED", "LOST_NH",
    ]  # fmt: skip
    assert [line.split() for line in lines[1:]] == [
        ["backfill", "*", "12.0", "0.0", "0", "0", "0", "0.0"],
        ["backfill", "physics", "0.0", "2.0", "1", "0", "0", "0.0"],
    ]
    starts = {line.index(line.split()[1], len(line.split()[0])) for line in lines}
    assert starts == {len("PARTITION") + 2}, "the account column starts at one place"
