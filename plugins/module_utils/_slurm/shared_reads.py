# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm node reads of many worker threads, served from one read of every node.

PRIVATE to the collection: names here can change without notice. The handover's workers
poll their nodes while they wait; from a few workers on, one read of all nodes is cheaper
than one read per worker.
"""

from __future__ import annotations

import threading
import time
import typing as t
from collections.abc import Callable

JSON = dict[str, t.Any]

SHARED_READS_FROM = 4  # workers polling at once from which they share one read of all nodes


class SharedNodeReads:
    """The workers' Slurm node reads, served from one read of every node.

    Each worker polls its node while it waits (drained? registered?); with 32 workers that
    was 32 calls to slurmrestd per poll, each slower the more there were.  Here a worker
    gets the node from the newest read of all nodes, if that read started after the worker's
    own last write and no longer than max_age_s ago; else it makes a new read, which the
    workers that ask meanwhile share.  Writes and job calls go straight through.
    """

    def __init__(
        self, slurm: t.Any, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.slurm = slurm
        self.max_age_s = max_age_s
        self.clock = clock
        self.reads = 0  # reads of all nodes made, for tests and the benchmark
        self._lock = threading.Lock()
        self._started = float("-inf")  # when the newest read was sent
        self._nodes: dict[str, JSON] = {}
        self._written = threading.local()  # this worker's last write

    def node(self, name: str) -> JSON | None:
        wanted = max(self.clock() - self.max_age_s, getattr(self._written, "at", float("-inf")))
        with self._lock:  # one read at a time; who waited finds it fresh enough
            if self._started < wanted:
                started = self.clock()
                self._nodes = {node["name"]: node for node in self.slurm.nodes()}
                self._started = started
                self.reads += 1
            return self._nodes.get(name)

    def _write(self, call: Callable[..., t.Any], *args: t.Any) -> None:
        try:
            call(*args)
        finally:
            # A read sent after this instant sees the write; one sent before may not.
            self._written.at = self.clock()

    def update_node(self, name: str, changes: JSON) -> None:
        self._write(self.slurm.update_node, name, changes)

    def delete_node(self, name: str) -> None:
        self._write(self.slurm.delete_node, name)

    def signal_job(self, job_id: int | str, signal: str = "SIGKILL") -> None:
        self._write(self.slurm.signal_job, job_id, signal)

    def jobs(self, keep: Callable[[JSON], t.Any] | None = None) -> list[JSON]:
        jobs: list[JSON] = self.slurm.jobs(keep)
        return jobs


def slurm_for_workers(
    slurm: t.Any, workers: int, poll_s: float, shared_from: int = SHARED_READS_FROM
) -> t.Any:
    """The Slurm client for this many workers: shared reads from shared_from workers on
    (0: never). Below it a node's own read is cheaper than a read of every node, which at a
    site of thousands is megabytes."""
    return SharedNodeReads(slurm, poll_s) if 0 < shared_from <= workers else slurm
