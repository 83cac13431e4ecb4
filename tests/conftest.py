# SPDX-License-Identifier: GPL-3.0-or-later
"""What every test under tests/ shares: secrets in directories that go when their fixture
ends (`secret_dir`, `secret_dirs`), and none left under tmp_path after a session
(tests/unit/secret_files.py, on pytest's pythonpath)."""

from __future__ import annotations

import typing as t

import pytest
from secret_files import (  # noqa: F401 (fixtures, registered by being here)
    no_secret_left,
    report_secrets_removed,
    secret_dir_fixture,
    secret_dirs,
)


def pytest_terminal_summary(
    terminalreporter: t.Any, exitstatus: int, config: pytest.Config
) -> None:
    report_secrets_removed(terminalreporter, config)
