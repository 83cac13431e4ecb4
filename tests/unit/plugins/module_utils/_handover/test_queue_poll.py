# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The event source's poll of Slurm's queue: jobs read again only when some changed."""

from __future__ import annotations

import typing as t

from fake_slurmrestd import FakeSlurmRestd, recording

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import QueuePoll
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
)

JOBS = "/slurm/v0.0.45/jobs/"
PARTITIONS = "/slurm/v0.0.45/partitions/"
# slurmctld's answer to update_time when no job changed since (Slurm 26.05, measured).
UNCHANGED = {
    "jobs": [],
    "last_update": {"set": True, "infinite": False, "number": 0},
    "warnings": [
        {
            "description": "No job changes since update_time[1795702207]=2026-11-26T14:10:07",
            "source": "op_handler_jobs",
        }
    ],
    "errors": [],
}


def client(fake: FakeSlurmRestd) -> SlurmRestClient:
    return SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="t", api_version="v0.0.45"),
        opener=fake,
        sleep=lambda _: None,
    )


def recorded_jobs() -> dict[str, t.Any]:
    _status, body = recording("26.05", "v0.0.45", "jobs")
    return body


def test_jobs_since_gives_none_when_no_job_changed() -> None:
    fake = FakeSlurmRestd("26.05")
    body = recorded_jobs()
    fake.answer("GET", JOBS, 200, body)
    fake.answer("GET", JOBS, 200, UNCHANGED)
    slurm = client(fake)
    jobs, last = slurm.jobs_since(None)
    assert [job["job_id"] for job in jobs or []] == [1, 2]
    assert last == body["last_update"]["number"]
    assert slurm.jobs_since(last) == (None, last)
    queries = [request["query"] for request in fake.sent("GET")[1:]]
    assert queries == ["", f"update_time={last}"]


def test_the_poll_reads_jobs_again_only_when_they_changed() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "partitions", "GET", "partitions/")
    body = recorded_jobs()
    fake.answer("GET", JOBS, 200, body)  # the first, full read
    fake.answer("GET", JOBS, 200, UNCHANGED)
    released = {**body, "jobs": [{**body["jobs"][1], "hold": False, "state_reason": "Priority"}]}
    fake.answer("GET", JOBS, 200, released)
    now = [0.0]
    poll = QueuePoll(["backfill"], full_every_s=300, clock=lambda: now[0])
    slurm = client(fake)

    first = poll.read(slurm)
    assert [(job.job_id, job.held) for job in first.jobs] == [(2, True)]
    assert set(first.partitions) == {"backfill"}
    now[0] = 15
    assert poll.read(slurm) is first  # unchanged: the same queue, 1 kB read
    now[0] = 30
    changed = poll.read(slurm)
    assert [(job.job_id, job.held) for job in changed.jobs] == [(2, False)]
    assert changed.partitions == first.partitions  # the partitions read on full reads only
    assert (poll.reads, poll.unchanged) == (3, 1)
    last = body["last_update"]["number"]
    assert [r["query"] for r in fake.sent("GET") if r["path"] == JOBS] == [
        "",
        f"update_time={last}",
        f"update_time={last}",
    ]
    assert len([r for r in fake.sent("GET") if r["path"] == PARTITIONS]) == 1


def test_a_full_read_comes_at_least_every_full_every_s() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "partitions", "GET", "partitions/")
    fake.answer("GET", JOBS, 200, recorded_jobs())
    now = [0.0]
    poll = QueuePoll(["backfill"], full_every_s=300, clock=lambda: now[0])
    slurm = client(fake)
    poll.read(slurm)
    now[0] = 299
    poll.read(slurm)
    now[0] = 300
    poll.read(slurm)
    queries = [r["query"] for r in fake.sent("GET") if r["path"] == JOBS]
    assert queries[0] == "" and queries[1].startswith("update_time=") and queries[2] == ""
    assert len([r for r in fake.sent("GET") if r["path"] == PARTITIONS]) == 2
