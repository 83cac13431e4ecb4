# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Node reads shared by the handover's workers, on the real client and recorded answers."""

from __future__ import annotations

import threading
import time

import pytest
from fake_slurmrestd import FakeSlurmRestd

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.shared_reads import (
    SHARED_READS_FROM,
    SharedNodeReads,
    slurm_for_workers,
)

VERSION = "v0.0.44"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorded() -> tuple[FakeSlurmRestd, SlurmRestClient]:
    fake = FakeSlurmRestd("26.05")
    fake.replay(VERSION, "nodes", "GET", "nodes/")
    fake.replay(VERSION, "node_cpu02", "GET", "node/cpu02")
    fake.answer("POST", f"/slurm/{VERSION}/node/cpu02", 200, {"errors": [], "warnings": []})
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="a-token", api_version=VERSION),
        opener=fake,
        sleep=lambda _: None,
    )
    return fake, client


def node_reads(fake: FakeSlurmRestd) -> int:
    return sum(1 for request in fake.sent("GET") if request["path"].endswith("/nodes/"))


def test_reads_within_the_age_share_one_read_of_all_nodes() -> None:
    fake, client = recorded()
    clock = Clock()
    reads = SharedNodeReads(client, max_age_s=0.5, clock=clock)
    cpu02 = reads.node("cpu02")
    assert cpu02 is not None and cpu02 == client.node("cpu02")  # the same shape as one node's
    assert reads.node("cpu01")["name"] == "cpu01"  # type: ignore[index]
    assert reads.node("gone") is None  # unknown to Slurm, as node() says
    clock.now += 0.4
    reads.node("cpu03")
    assert node_reads(fake) == 1 and reads.reads == 1
    clock.now += 0.2  # older than max_age_s now
    reads.node("cpu03")
    assert node_reads(fake) == 2


def test_a_worker_reads_anew_after_its_own_write() -> None:
    fake, client = recorded()
    clock = Clock()
    reads = SharedNodeReads(client, max_age_s=60, clock=clock)
    reads.node("cpu02")
    clock.now += 0.01
    reads.update_node("cpu02", {"state": ["DRAIN"], "reason": "hpcops: test"})
    assert fake.sent("POST")[0]["body"] == {"state": ["DRAIN"], "reason": "hpcops: test"}
    reads.node("cpu02")
    assert node_reads(fake) == 2  # a read from before the write would not show the drain

    # Another worker's write does not make this one read again.
    other = threading.Thread(target=reads.update_node, args=("cpu02", {"state": ["DRAIN"]}))
    clock.now += 0.01
    other.start()
    other.join()
    reads.node("cpu02")
    assert node_reads(fake) == 2


def test_workers_asking_together_wait_for_one_read() -> None:
    fake, client = recorded()
    slow = SlowNodes(client)
    reads = SharedNodeReads(slow, max_age_s=0.5)
    workers = [threading.Thread(target=reads.node, args=("cpu02",)) for _worker in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert slow.calls == 1 and node_reads(fake) == 1


class SlowNodes:
    """The client, with a read of all nodes that takes as long as slurmrestd under load."""

    def __init__(self, client: SlurmRestClient) -> None:
        self.client = client
        self.calls = 0

    def nodes(self) -> list[dict[str, object]]:
        self.calls += 1
        time.sleep(0.2)
        return self.client.nodes()


@pytest.mark.parametrize(
    ("workers", "shared_from", "shared"),
    [
        (1, SHARED_READS_FROM, False),
        (SHARED_READS_FROM - 1, SHARED_READS_FROM, False),
        (SHARED_READS_FROM, SHARED_READS_FROM, True),
        (2, 2, True),
        (64, 0, False),
    ],
)
def test_reads_are_shared_from_enough_workers(workers: int, shared_from: int, shared: bool) -> None:
    _fake, client = recorded()
    chosen = slurm_for_workers(client, workers, 0.5, shared_from)
    assert isinstance(chosen, SharedNodeReads) is shared
    assert (chosen.slurm if shared else chosen) is client
