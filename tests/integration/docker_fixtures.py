# SPDX-License-Identifier: GPL-3.0-or-later
"""dockerd for the test modules that need it (tests/lab/docker_engine.py), shared by every
pytest process of a run: `make test` runs the kind scenarios in one process and the bare-metal
hosts of node_prep in another. Test modules load it with ``pytest_plugins = ["docker_fixtures"]``.

Each module holds a shared lock on ``users.lock`` while it uses dockerd. The first user starts
it unless it runs already, and records its pid in ``started-by-tests``; the last one out stops
the dockerd the tests started. One that ran before the tests stays up.

The users change the machine's inotify limits (node_prep raises them on its hosts and on kind's
nodes, which share the machine's kernel). The first user in records them and the last one
out puts them back: a user that put them back while another still ran would undo what the
other's node_prep set, and its second run would change them again.
"""

from __future__ import annotations

import fcntl
import json
import sys
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

from docker_engine import RUN_DIR, DockerEngine
from toolbox import LabError

USERS_LOCK = RUN_DIR / "users.lock"
STARTED_BY_TESTS = RUN_DIR / "started-by-tests"
MACHINE_SYSCTLS = RUN_DIR / "sysctls-before-tests.json"
SHARED_SYSCTLS = ("fs/inotify/max_user_instances", "fs/inotify/max_user_watches")
PROC_SYS = Path("/proc/sys")


def record_machine_sysctls(record: Path = MACHINE_SYSCTLS, proc_sys: Path = PROC_SYS) -> None:
    """Write the shared sysctls' values to `record` unless a user already did."""
    values = {name: (proc_sys / name).read_text() for name in SHARED_SYSCTLS}
    try:
        with record.open("x") as out:
            json.dump(values, out)
    except FileExistsError:
        pass  # recorded by the first user in, before anybody changed them


def restore_machine_sysctls(record: Path = MACHINE_SYSCTLS, proc_sys: Path = PROC_SYS) -> None:
    """Put the recorded values back and forget them (the last user out)."""
    try:
        values = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    for name, value in values.items():
        (proc_sys / name).write_text(value)
    record.unlink(missing_ok=True)


class SessionEngine(DockerEngine):
    """dockerd while this module uses it (see the module's docstring)."""

    def __init__(self) -> None:
        self._users: t.TextIO | None = None

    @property
    def started_here(self) -> bool:
        """Whether the dockerd that runs now was started by the tests."""
        pid = self.pid()
        try:
            return pid is not None and STARTED_BY_TESTS.read_text().strip() == str(pid)
        except OSError:
            return False

    def join(self, alone: bool = False) -> None:
        """Hold dockerd for this module, starting it when nobody runs it; `alone`: no other
        module uses it meanwhile (kind's destroy checks the host has nothing of docker left)."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        self._users = USERS_LOCK.open("w")
        if alone:
            fcntl.flock(self._users, fcntl.LOCK_EX)
            record_machine_sysctls()
            if not self.status()["answering"]:
                self.up()
                STARTED_BY_TESTS.write_text(f"{self.pid()}\n")
            return
        while True:
            fcntl.flock(self._users, fcntl.LOCK_SH)
            record_machine_sysctls()
            if self.status()["answering"]:
                return
            # Alone to start it: nobody may use or stop it meanwhile. Then back to shared.
            fcntl.flock(self._users, fcntl.LOCK_EX)
            if not self.status()["answering"]:
                self.up()
                STARTED_BY_TESTS.write_text(f"{self.pid()}\n")

    def leave(self) -> None:
        """Let go of dockerd; the last user stops it when the tests started it."""
        if self._users is None:
            return
        try:
            fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another module, maybe in the other pytest process, still uses it
        else:
            restore_machine_sysctls()
            if self.started_here:
                self.down()
                STARTED_BY_TESTS.unlink(missing_ok=True)
        finally:
            self._users.close()
            self._users = None

    def leave_last(self, timeout_s: float) -> None:
        """Leave, then wait until the last user out has stopped the dockerd the tests started."""
        self.leave()
        deadline = time.monotonic() + timeout_s
        while self.pid():
            if time.monotonic() > deadline:
                raise LabError(f"another test module still used dockerd after {timeout_s:.0f} s")
            time.sleep(2)
        # dockerd's pid goes first; its firewall rules, docker0 and mounts after, while the
        # user that stops it holds the lock alone: wait for its whole down (a cold run
        # compared the firewall in between and found docker's chains still there).
        with USERS_LOCK.open("w") as users:
            fcntl.flock(users, fcntl.LOCK_SH)


@pytest.fixture(scope="module")
def docker_engine(request: pytest.FixtureRequest) -> Iterator[SessionEngine]:
    """dockerd for the module; one that sets DOCKER_ALONE = True has it to itself."""
    engine = SessionEngine()
    try:
        engine.join(alone=getattr(request.module, "DOCKER_ALONE", False))
    except LabError as err:
        engine.leave()
        pytest.fail(f"dockerd did not start: {err}", pytrace=False)
    yield engine
    engine.leave()
