# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a handover step waits: its first looks soon, then every poll_interval_s."""

from __future__ import annotations

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import (
    Handover,
    Settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import Policy
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
)


def waiting(poll_s: float) -> tuple[Handover, list[float]]:
    slept: list[float] = []
    settings = Settings(
        markers=HandoverMarkers(),
        policy=Policy(pool_selector={"hpcops.io/pool": "interactive"}),
        by="test",
        poll_s=poll_s,
    )
    return Handover(None, None, settings, sleep=slept.append), slept  # type: ignore[arg-type]


def test_the_first_looks_come_sooner_then_every_poll_interval() -> None:
    handover, slept = waiting(0.5)
    answers = iter([False] * 7 + ["done"])
    assert handover._wait(lambda: next(answers), 60) == "done"
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5]


def test_a_poll_interval_below_the_first_look_is_kept() -> None:
    handover, slept = waiting(0.02)
    answers = iter([False, False, True])
    assert handover._wait(lambda: next(answers), 60) is True
    assert slept == [0.02, 0.02]


def test_a_wait_that_times_out_looks_once_and_returns_the_last_answer() -> None:
    handover, slept = waiting(0.5)
    assert handover._wait(lambda: None, 0) is None
    assert slept == []
