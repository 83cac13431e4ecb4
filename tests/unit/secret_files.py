# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets the tests write (a JWT key, a kubeconfig with a token) live in a directory of their
own, mode 0700, removed when the fixture or block that made it ends, failed test or not.

    def test_x(secret_dir: Path) -> None:           # one test's
        key = secret_dir / "jwt.key"

    @pytest.fixture(scope="module")
    def pool(secret_dirs) -> Iterator[Pool]:         # a longer-lived fixture's
        with secret_dirs("handover") as keys:
            ...
            yield pool

Never under pytest's tmp_path: pytest keeps the last three sessions' directories, and with
them every key a test wrote there. At the end of a session, `no_secret_left` removes any file
under this session's tmp_path that looks like one (the project's check: a name ending in .key
or holding "jwt" or "token") and the summary names them, so a writer that skipped these
helpers is found, and its secret does not stay.
"""

from __future__ import annotations

import contextlib
import fnmatch
import shutil
import tempfile
import typing as t
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The names the project's pre-stop check looks for under /tmp/pytest-of-*.
SECRET_NAMES = ("*.key", "*jwt*", "*token*")
secrets_removed_key = pytest.StashKey[list[str]]()


@contextlib.contextmanager
def secret_dir(prefix: str = "secrets") -> Iterator[Path]:
    """A fresh directory only its owner can enter, removed with what it holds at the end."""
    path = Path(tempfile.mkdtemp(prefix=f"hpcops-{prefix}-"))  # mkdtemp makes it 0700
    path.chmod(0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(name="secret_dir")
def secret_dir_fixture() -> Iterator[Path]:
    """A secret_dir for one test, removed when the test ends, passed or failed."""
    with secret_dir("test") as path:
        yield path


@pytest.fixture(scope="session")
def secret_dirs() -> Callable[[str], contextlib.AbstractContextManager[Path]]:
    """secret_dir itself, for fixtures of a wider scope than one test."""
    return secret_dir


def secret_files(root: Path) -> list[Path]:
    """Files under root whose names look like a key or a token."""
    if not root.is_dir():
        return []
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and any(fnmatch.fnmatch(path.name, name) for name in SECRET_NAMES)
    )


@pytest.fixture(scope="session", autouse=True)
def no_secret_left(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """At the session's end: remove key- or token-named files from its own tmp_path tree
    (never another session's) and keep their names for the summary."""
    yield
    root = tmp_path_factory.getbasetemp()
    removed = []
    for path in secret_files(root):
        path.unlink(missing_ok=True)
        removed.append(str(path.relative_to(root)))
    request.config.stash[secrets_removed_key] = removed


def report_secrets_removed(terminalreporter: object, config: pytest.Config) -> None:
    removed = config.stash.get(secrets_removed_key, [])
    if removed:
        write = terminalreporter.write_line  # type: ignore[attr-defined]
        write(
            f"removed {len(removed)} key or token file(s) tests left under tmp_path "
            "(write them with the secret_dir fixture instead):",
            yellow=True,
        )
        for name in removed:
            write(f"  {name}")


def pytest_terminal_summary(
    terminalreporter: t.Any, exitstatus: int, config: pytest.Config
) -> None:
    report_secrets_removed(terminalreporter, config)
