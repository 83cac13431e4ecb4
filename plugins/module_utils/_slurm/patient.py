# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm calls of the handover, riding out a slurmrestd outage until a step's deadline.

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations

import threading
import time
import typing as t
from collections.abc import Callable

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmConnectionError,
    SlurmRequestError,
    SlurmRestError,
)

JSON = dict[str, t.Any]

# slurmrestd answers these when it, or slurmctld behind it, is briefly out of reach.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# A slurmrestd that accepts connections and does not answer is an outage too. It answers a
# handover's reads in about a second, even for dozens of nodes on two loaded cores, so a
# request not answered within this long is given up and noted like a refused connection.
REQUEST_TIMEOUT_S = 10.0
# And never less than this near a step's deadline: a request needs some time to be answered.
SHORTEST_REQUEST_TIMEOUT_S = 2.0


def transient(err: SlurmRestError) -> bool:
    """An outage that may pass: slurmrestd unreachable, or slurmctld behind it."""
    return isinstance(err, SlurmConnectionError) or (
        isinstance(err, SlurmRequestError) and err.status in TRANSIENT_STATUSES
    )


class PatientSlurm:
    """The Slurm calls of the handover, riding out an outage until the step's deadline.

    A reclaim with minutes of grace left should not fail for an outage shorter than that
    grace.  Each worker thread names the deadline of the step it is in (`until`); a call that
    meets an outage (a refused connection, a transient HTTP status, or no answer within
    REQUEST_TIMEOUT_S) waits, with backoff and a note each time, and tries again until that
    deadline, then fails with the client's own error.  `attach` makes a client send each
    request once (the backoff and the notes are here) and wait no longer than the step allows.
    """

    def __init__(
        self,
        inner: t.Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        first_wait_s: float = 1.0,
        longest_wait_s: float = 15.0,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.sleep = sleep
        self.first_wait_s = first_wait_s
        self.longest_wait_s = longest_wait_s
        self._step = threading.local()

    def attach(self, client: t.Any) -> None:
        """Let this wrapper time and retry the requests of `client` (a SlurmRestClient)."""
        client.connection.retries = 0
        client.timeout_for = self.request_timeout

    def request_timeout(self) -> float | None:
        """How long this thread's request may wait for an answer; None outside a step."""
        deadline: float | None = getattr(self._step, "deadline", None)
        if deadline is None:
            return None
        left = deadline - self.clock()
        return max(min(REQUEST_TIMEOUT_S, left), SHORTEST_REQUEST_TIMEOUT_S)

    def until(self, deadline: float, notes: list[str]) -> None:
        """This thread's calls wait out outages until `deadline`, noting each wait."""
        self._step.deadline = deadline
        self._step.notes = notes

    def _call(self, call: Callable[..., t.Any], *args: t.Any) -> t.Any:
        wait = self.first_wait_s
        while True:
            try:
                return call(*args)
            except SlurmRestError as err:
                left = getattr(self._step, "deadline", float("-inf")) - self.clock()
                if not transient(err) or left <= 0:
                    raise
                pause = min(wait, left)
                self._step.notes.append(
                    f"{str(err).split(';', 1)[0]}; trying again in {pause:.0f} s "
                    f"({left:.0f} s left before this step's deadline)"
                )
                self.sleep(pause)
                wait = min(wait * 2, self.longest_wait_s)

    def node(self, name: str) -> JSON | None:
        node: JSON | None = self._call(self.inner.node, name)
        return node

    def jobs(self, keep: t.Callable[[JSON], t.Any] | None = None) -> list[JSON]:
        jobs: list[JSON] = self._call(self.inner.jobs, keep)
        return jobs

    def update_node(self, name: str, changes: JSON) -> None:
        self._call(self.inner.update_node, name, changes)

    def delete_node(self, name: str) -> None:
        self._call(self.inner.delete_node, name)

    def signal_job(self, job_id: int | str, signal: str = "SIGKILL") -> None:
        self._call(self.inner.signal_job, job_id, signal)
