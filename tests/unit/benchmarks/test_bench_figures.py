# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmarks' shared figures (benchmarks/_common.py): a case with no trial prints "-"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import _common


def test_no_trial_has_no_figure_and_prints_a_dash() -> None:
    for figure in (
        _common.median([]),
        _common.mean([]),
        _common.maximum([]),
        _common.percentile([], 0.95),
        _common.ratio(None, 2.0),
        _common.ratio(1.0, 0.0),
    ):
        assert figure is None
    assert _common.figure(None) == "-"
    assert _common.summary([]) == ("-", "-", "-")
    assert _common.within(None, 5) == "not run"


def test_figures_of_trials() -> None:
    assert _common.median([3.0, 1.0, 2.0]) == 2.0
    assert _common.mean([1.0, 2.0]) == 1.5
    assert _common.summary([1.0, 2.0, 4.0], 1) == ("2.0", "4.0", "4.0")
    assert _common.within(0.4, 0.5) == "met" and _common.within(0.6, 0.5) == "missed"
    assert _common.ratio(3.0, 2.0) == 1.5


@pytest.mark.parametrize(
    ("count", "rank"),
    [(1, 1), (5, 5), (10, 10), (20, 19), (100, 95), (101, 96)],
)
def test_p95_is_the_nearest_rank(count: int, rank: int) -> None:
    values = [float(i) for i in range(count, 0, -1)]  # unordered: count .. 1
    assert _common.percentile(values, 0.95) == float(rank)


def test_a_table_prints_what_it_has(capsys: pytest.CaptureFixture[str]) -> None:
    _common.table([("case", "median s"), ("events", _common.figure(_common.median([])))])
    assert capsys.readouterr().out.splitlines() == ["case    median s", "events  -"]


def test_a_failed_case_is_recorded_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    failed: dict[str, str] = {}

    def broken() -> list[float]:
        raise RuntimeError("slurmrestd refused\nwith details")

    assert _common.attempt("many", broken, failed) == []
    assert failed == {"many": "RuntimeError: slurmrestd refused"}
    assert "many failed" in capsys.readouterr().err
