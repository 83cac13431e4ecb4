# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Handover steps ride out a slurmrestd outage until their deadline (PatientSlurm), on the
real client with recorded answers; the clock is the test's."""

from __future__ import annotations

import typing as t
from urllib.error import URLError

import pytest
from fake_slurmrestd import FakeSlurmRestd

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import longest_grace
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    PartitionPolicy,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.patient import (
    REQUEST_TIMEOUT_S,
    PatientSlurm,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmAuthError,
    SlurmConnectionError,
    SlurmRestClient,
)

VERSION = "v0.0.44"
REFUSED = URLError(ConnectionRefusedError(111, "Connection refused"))


class Clock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def patient(fake: FakeSlurmRestd, clock: Clock) -> PatientSlurm:
    # One try per call inside the client, so the test counts the patient layer's tries.
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="a-token", api_version=VERSION, retries=0),
        opener=fake,
        sleep=clock.sleep,
    )
    return PatientSlurm(client, clock=clock, sleep=clock.sleep)


def test_an_outage_shorter_than_the_deadline_is_waited_out_with_a_note_each_time() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    for _refusal in range(4):
        fake.fail("GET", f"/slurm/{VERSION}/node/cpu02", REFUSED)
    fake.replay(VERSION, "node_cpu02", "GET", "node/cpu02")
    slurm = patient(fake, clock)
    notes: list[str] = []
    slurm.until(clock.now + 60, notes)
    assert slurm.node("cpu02")["name"] == "cpu02"  # type: ignore[index]
    assert clock.slept == [1, 2, 4, 8]  # backoff, doubling
    assert len(notes) == 4
    assert notes[0].startswith("cannot reach slurmrestd at http://127.0.0.1:6820")
    assert "trying again in 1 s (60 s left before this step's deadline)" in notes[0]


def test_at_the_deadline_the_clients_own_error_is_raised() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    fake.fail("GET", f"/slurm/{VERSION}/node/cpu02", REFUSED)
    slurm = patient(fake, clock)
    notes: list[str] = []
    slurm.until(clock.now + 20, notes)
    with pytest.raises(SlurmConnectionError, match="cannot reach slurmrestd"):
        slurm.node("cpu02")
    assert sum(clock.slept) == 20  # waited exactly until the deadline, not beyond
    assert clock.slept == [1, 2, 4, 8, 5]


def test_waits_grow_no_longer_than_the_longest_wait() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    fake.fail("GET", f"/slurm/{VERSION}/jobs/", REFUSED)
    slurm = patient(fake, clock)
    slurm.until(clock.now + 100, [])
    with pytest.raises(SlurmConnectionError):
        slurm.jobs()
    assert max(clock.slept) == slurm.longest_wait_s == 15


def test_a_controller_out_of_reach_behind_slurmrestd_is_waited_out_too() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    fake.answer(
        "POST",
        f"/slurm/{VERSION}/node/cpu02",
        502,
        {"errors": [{"description": "Unable to contact slurm controller"}]},
    )
    fake.answer("POST", f"/slurm/{VERSION}/node/cpu02", 200, {"errors": []})
    slurm = patient(fake, clock)
    notes: list[str] = []
    slurm.until(clock.now + 30, notes)
    slurm.update_node("cpu02", {"state": ["DRAIN"], "reason": "hpcops: reclaim x"})
    assert len(notes) == 1 and "HTTP 502" in notes[0]


def test_answers_that_are_not_outages_fail_at_once() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    fake.replay(VERSION, "unauthenticated", "GET", "nodes/")
    fake.replay(VERSION, "unauthenticated", "GET", "node/cpu02")
    slurm = patient(fake, clock)
    slurm.until(clock.now + 60, [])
    with pytest.raises(SlurmAuthError):
        slurm.node("cpu02")
    assert clock.slept == []


def test_without_a_step_deadline_nothing_is_waited_for() -> None:
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    fake.fail("GET", f"/slurm/{VERSION}/node/cpu02", REFUSED)
    with pytest.raises(SlurmConnectionError):
        patient(fake, clock).node("cpu02")
    assert clock.slept == []


def test_the_longest_grace_covers_every_partition_and_the_default() -> None:
    policy = Policy(
        pool_selector={"hpcops.io/pool": "interactive"},
        partitions={"backfill": PartitionPolicy(600, "requeue"), "short": PartitionPolicy(30)},
        default_partition=PartitionPolicy(300),
    )
    assert longest_grace(policy) == 600


def test_a_slurmrestd_that_does_not_answer_is_an_outage_noted_each_time() -> None:
    """Hung (accepts, never answers): each request gives up after REQUEST_TIMEOUT_S, or what
    is left of the step, and is noted and retried like a refused connection."""
    fake, clock = FakeSlurmRestd("26.05"), Clock()
    timeouts: list[float] = []

    def opener(url: str, **kwargs: t.Any) -> t.Any:
        timeouts.append(kwargs["timeout"])
        try:
            return fake(url, **kwargs)
        except URLError:
            clock.now += kwargs["timeout"]  # the wait for an answer that never came
            raise

    hung = URLError(TimeoutError("timed out"))
    for _unanswered in range(2):
        fake.fail("GET", f"/slurm/{VERSION}/node/cpu02", hung)
    fake.replay(VERSION, "node_cpu02", "GET", "node/cpu02")
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="a-token", api_version=VERSION),
        opener=opener,
        sleep=clock.sleep,
    )
    slurm = PatientSlurm(client, clock=clock, sleep=clock.sleep)
    slurm.attach(client)
    assert client.connection.retries == 0  # the patient layer retries, with its notes
    notes: list[str] = []
    slurm.until(clock.now + 30, notes)
    assert slurm.node("cpu02")["name"] == "cpu02"  # type: ignore[index]
    # 10 s each while the step has that long, then what is left (30 - 10 - 1 - 10 - 2).
    assert timeouts[:2] == [REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S] and timeouts[-1] == 7.0
    assert clock.slept == [1, 2]
    assert len(notes) == 2
    assert notes[0].startswith(
        "slurmrestd at http://127.0.0.1:6820 did not answer GET /slurm/v0.0.44/node/cpu02 "
        "within 10 s (1 attempt)"
    )
    # Near the deadline, never less than 2 s; outside a step, the connection's timeout.
    slurm.until(clock.now + 0.5, notes)
    assert slurm.request_timeout() == 2.0
    assert PatientSlurm(client).request_timeout() is None
