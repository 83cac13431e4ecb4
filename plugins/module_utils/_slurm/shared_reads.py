# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm node reads of many worker threads, served from one read of every node.

PRIVATE to the collection: names here can change without notice. The handover's workers
poll their nodes while they wait; from a few workers on, one read of all nodes is cheaper
than one read per worker, and a write to many nodes cheaper than one write per node.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import typing as t
from collections.abc import Callable

try:
    from hostlist import collect_hostlist as compress_hostlist
except ImportError:  # deletes then go one node per call
    compress_hostlist = None

JSON = dict[str, t.Any]

SHARED_READS_FROM = 4  # workers polling at once from which they share one read of all nodes


class SharedNodeReads:
    """The workers' Slurm node reads, served from one read of every node.

    Each worker polls its node while it waits (drained? registered?); with 32 workers that
    was 32 calls to slurmrestd per poll, each slower the more there were.  Here a worker
    gets the node from the newest read of all nodes, if that read started after the worker's
    own last write and no longer than max_age_s ago; else it makes a new read, which the
    workers that ask meanwhile share.  Deletes of node records asked for together go in one
    call, and so do updates with the same changes; other writes and job calls go straight
    through.
    """

    def __init__(
        self,
        slurm: t.Any,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slurm = slurm
        self.max_age_s = max_age_s
        self.clock = clock
        self.reads = 0  # reads of all nodes made, for tests and the benchmark
        self._lock = threading.Lock()
        self._started = float("-inf")  # when the newest read was sent
        self._nodes: dict[str, JSON] = {}
        self._written = threading.local()  # this worker's last write
        # Batched writes (deletes; updates with the same body), by what they do: the nodes
        # asked for and not sent yet; the answers of those another worker sent.
        self._batch_lock = threading.Lock()
        self._asked: dict[tuple[str, str], set[str]] = {}
        self._done: dict[tuple[str, str, str], tuple[Exception | None, float]] = {}
        self.calls = {"delete": 0, "update": 0}  # writes made, for tests and the benchmark

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
        """Update a node; updates with the same changes asked for while another write is
        under way go together in the next call, as one host list. The reclaims of a run
        drain their nodes with one reason: 32 drains were 32 calls, which slurmctld serves
        one after the other (1.1 s in the lab)."""
        what = json.dumps(changes, sort_keys=True)
        self._together("update", what, name, lambda nodes: self.slurm.update_node(nodes, changes))

    def delete_node(self, name: str) -> None:
        """Delete a node's record; deletes asked for while another write is under way go
        together in the next call, as one host list (group commit). 32 nodes given back at
        once made 32 calls, which slurmctld serves one after the other (1.7 s in the lab);
        now 8 to 17."""
        self._together("delete", "", name, self.slurm.delete_node)

    def _together(self, kind: str, what: str, name: str, send: Callable[[str], None]) -> None:
        """A write of this kind (and body, `what`) to node `name`, batched with the same
        asked for meanwhile. A batch that fails is sent again node by node, so that each
        worker gets its own answer."""
        key = (kind, what)
        with self._lock:
            self._asked.setdefault(key, set()).add(name)
        with self._batch_lock:  # one batched write at a time
            with self._lock:
                asked = self._asked[key]
                if name not in asked:  # an earlier batch had it: its answer
                    error, at = self._done.pop((*key, name))
                    self._written.at = at
                    if error is not None:
                        raise error
                    return
                batch = sorted(asked)
                asked.clear()
            answers, calls = self._send(batch, send)
            self.calls[kind] += calls
            with self._lock:
                at = self.clock()
                for other in batch:
                    if other != name:
                        self._done[(*key, other)] = (answers[other], at)
            self._written.at = at
            own_error = answers[name]
            if own_error is not None:
                raise own_error

    @staticmethod
    def _send(
        names: list[str], send: Callable[[str], None]
    ) -> tuple[dict[str, Exception | None], int]:
        """Each name's error (None: done), from one call for all of them or else one each;
        and the calls made."""
        calls = 0
        if len(names) > 1 and compress_hostlist is not None:
            calls += 1
            # A refused batch may have done some of its nodes (slurmctld does what it can,
            # then answers 422 for the whole list): node by node, those answer anew.
            with contextlib.suppress(Exception):
                send(compress_hostlist(names))
                return dict.fromkeys(names), calls
        answers: dict[str, Exception | None] = {}
        for name in names:
            calls += 1
            try:
                send(name)
            except Exception as err:  # noqa: BLE001 - the asking worker's to raise
                answers[name] = err
            else:
                answers[name] = None
        return answers, calls

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
