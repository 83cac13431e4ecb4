# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Node reads shared by the handover's workers, on the real client and recorded answers."""

from __future__ import annotations

import threading
import time
import typing as t

import pytest
from fake_slurmrestd import FakeSlurmRestd

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
    SlurmRestError,
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


class DeletingSlurm:
    """The delete calls a SharedNodeReads makes; the first waits until `release` is set, so
    that the other workers ask meanwhile; names in `refused` (or any host list, with
    `hostlists=False`) are answered with an error."""

    def __init__(self, refused: tuple[str, ...] = (), *, hostlists: bool = True) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()
        self.refused = refused
        self.hostlists = hostlists

    def delete_node(self, name: str) -> None:
        first = not self.calls
        self.calls.append(name)
        if first:
            assert self.release.wait(5)
        if name in self.refused or ("[" in name and not self.hostlists):
            raise SlurmRestError(f"node {name}: Invalid node name specified", status=422)


def wait_for(done: t.Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Fail, rather than hang the suite, when the workers never get there."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(0.001)


def delete_together(slurm: DeletingSlurm, names: list[str]) -> dict[str, Exception | None]:
    """The first name's delete under way, the others asked for meanwhile; each one's answer."""
    reads = SharedNodeReads(slurm, max_age_s=1)
    answers: dict[str, Exception | None] = {}

    def delete(name: str) -> None:
        try:
            reads.delete_node(name)
        except SlurmRestError as err:
            answers[name] = err
        else:
            answers[name] = None

    first = threading.Thread(target=delete, args=(names[0],))
    first.start()
    wait_for(lambda: bool(slurm.calls), "the first delete to be sent")
    others = [threading.Thread(target=delete, args=(name,)) for name in names[1:]]
    for worker in others:
        worker.start()
    wait_for(
        lambda: len(reads._asked[("delete", "")]) == len(others), "the other deletes to be asked"
    )
    slurm.release.set()
    for worker in [first, *others]:
        worker.join(5)
    assert reads.calls["delete"] == len(slurm.calls)
    return answers


def test_deletes_asked_for_while_one_is_under_way_go_in_one_call_as_a_host_list() -> None:
    slurm = DeletingSlurm()
    names = [f"int{i:02d}" for i in range(1, 33)]
    answers = delete_together(slurm, names)
    assert slurm.calls == ["int01", "int[02-32]"]
    assert answers == dict.fromkeys(names)


def test_a_batch_refused_is_sent_again_node_by_node_and_each_worker_gets_its_answer() -> None:
    slurm = DeletingSlurm(refused=("int03",), hostlists=False)
    answers = delete_together(slurm, ["int01", "int02", "int03", "int04"])
    assert slurm.calls == ["int01", "int[02-04]", "int02", "int03", "int04"]
    assert answers["int01"] is None and answers["int02"] is None and answers["int04"] is None
    assert "int03" in str(answers["int03"])


def test_a_delete_alone_is_one_call_for_its_node() -> None:
    slurm = DeletingSlurm()
    slurm.release.set()
    reads = SharedNodeReads(slurm, max_age_s=1)
    reads.delete_node("int07")
    assert slurm.calls == ["int07"] and reads.calls["delete"] == 1
    refused = DeletingSlurm(refused=("int08",))
    refused.release.set()
    with pytest.raises(SlurmRestError, match="int08"):
        SharedNodeReads(refused, max_age_s=1).delete_node("int08")


class UpdatingSlurm:
    """The update calls a SharedNodeReads makes, as (node or host list, reason); the first
    waits until `release` is set, so that the other workers ask meanwhile."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.release = threading.Event()

    def update_node(self, name: str, changes: dict[str, t.Any]) -> None:
        first = not self.calls
        self.calls.append((name, changes["reason"]))
        if first:
            assert self.release.wait(5)


def test_updates_with_the_same_changes_go_in_one_call_others_in_their_own() -> None:
    slurm = UpdatingSlurm()
    reads = SharedNodeReads(slurm, max_age_s=1)

    def drain(name: str, reason: str) -> threading.Thread:
        worker = threading.Thread(
            target=reads.update_node, args=(name, {"state": ["DRAIN"], "reason": reason})
        )
        worker.start()
        return worker

    first = drain("int01", "hpcops: reclaim run-a")
    wait_for(lambda: bool(slurm.calls), "the first update to be sent")
    others = [drain(f"int{i:02d}", "hpcops: reclaim run-a") for i in range(2, 33)]
    others.append(drain("int33", "hpcops: reclaim run-b"))  # a node resumed from another run
    wait_for(
        lambda: sum(len(asked) for asked in reads._asked.values()) == len(others),
        "the other updates to be asked",
    )
    slurm.release.set()
    for worker in [first, *others]:
        worker.join(5)
    assert slurm.calls[0] == ("int01", "hpcops: reclaim run-a")
    assert sorted(slurm.calls[1:]) == [
        ("int33", "hpcops: reclaim run-b"),
        ("int[02-32]", "hpcops: reclaim run-a"),
    ]
    assert reads.calls == {"update": 3, "delete": 0}
