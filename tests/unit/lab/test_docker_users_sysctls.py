# SPDX-License-Identifier: GPL-3.0-or-later
"""The machine's inotify limits shared by dockerd's users (tests/integration/docker_fixtures.py):
recorded by the first user in, put back by the last one out, whatever the users set between."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from docker_fixtures import SHARED_SYSCTLS, record_machine_sysctls, restore_machine_sysctls


def proc_sys(root: Path, value: str) -> Path:
    for name in SHARED_SYSCTLS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(value)
    return root


def values(root: Path) -> set[str]:
    return {(root / name).read_text() for name in SHARED_SYSCTLS}


def test_the_last_user_out_puts_back_what_the_first_one_in_found(tmp_path: Path) -> None:
    machine = proc_sys(tmp_path / "sys", "128\n")
    record = tmp_path / "record.json"
    record_machine_sysctls(record, machine)  # the kind scenarios join
    proc_sys(machine, "8192\n")  # their node_prep raises the limits
    record_machine_sysctls(record, machine)  # node_prep's hosts join: the record stays
    restore_machine_sysctls(record, machine)
    assert values(machine) == {"128\n"}
    assert not record.exists()


def test_without_a_record_nothing_is_written(tmp_path: Path) -> None:
    machine = proc_sys(tmp_path / "sys", "8192\n")
    restore_machine_sysctls(tmp_path / "record.json", machine)
    assert values(machine) == {"8192\n"}
