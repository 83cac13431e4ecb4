# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the benchmarks share: figures over trials that may be missing, and their tables.

A case may end with no trial: left out (`--cron-trials 0`, `--cases`), or failed before its
first. Its figures are None here and print as "-", so the script still prints the table of
what it measured instead of crashing on `statistics.median([])` after the work is done.
"""

from __future__ import annotations

import math
import statistics
import sys
import typing as t
from collections.abc import Iterable, Sequence

NO_FIGURE = "-"


def median(values: Iterable[float]) -> float | None:
    """The median, or None for no value."""
    found = list(values)
    return statistics.median(found) if found else None


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean, or None for no value."""
    found = list(values)
    return statistics.fmean(found) if found else None


def maximum(values: Iterable[float]) -> float | None:
    """The largest value, or None for no value."""
    return max(values, default=None)


def percentile(values: Iterable[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` 0.95: the value 95 % of the trials stay at or
    under; of 5 or 10 trials, their maximum), or None for no value."""
    ordered = sorted(values)
    if not ordered:
        return None
    # The small epsilon: 0.95 * 100 is 95.00000000000001 in floating point.
    rank = math.ceil(share * len(ordered) - 1e-9)
    return ordered[min(len(ordered) - 1, max(0, rank - 1))]


def figure(value: float | None, digits: int = 2) -> str:
    """A figure for a table: `digits` decimals, or "-" when there is none."""
    return NO_FIGURE if value is None else f"{value:.{digits}f}"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def within(value: float | None, limit: float) -> str:
    """Whether a measured figure meets its target: met, missed or not run."""
    if value is None:
        return "not run"
    return "met" if value <= limit else "missed"


def table(rows: Sequence[Sequence[str]]) -> None:
    """Print rows (the first is the header) as left-aligned columns."""
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def summary(values: Sequence[float], digits: int = 2) -> tuple[str, str, str]:
    """(median, p95, max) of a case's seconds as table cells; "-" each for no trial."""
    return (
        figure(median(values), digits),
        figure(percentile(values, 0.95), digits),
        figure(maximum(values), digits),
    )


T = t.TypeVar("T")


def attempt(case: str, measure: t.Callable[[], list[T]], failed: dict[str, str]) -> list[T]:
    """A case's trials, or none when it fails: its reason goes to failed[case] (and stderr),
    so that the other cases still run and the table says why this one has no figures."""
    try:
        return measure()
    except Exception as err:  # noqa: BLE001 (any failure of one case is reported, not raised)
        failed[case] = reason(err)
        print(f"  {case} failed: {failed[case]}", file=sys.stderr, flush=True)
        return []


def reason(err: BaseException) -> str:
    """An exception as one line of a table: its type and the first line of its message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200]}" if lines else type(err).__name__
