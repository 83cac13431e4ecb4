# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the preflight's results for people (a table, the fixes) and for tools (JSON)."""

from __future__ import annotations

import typing as t
from collections.abc import Iterable, Mapping

from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.checks import (
    FAIL,
    PASS,
    SKIP,
    WAIVED,
    WARN,
)

# The worse of two outcomes wins a table cell.
_RANK = {SKIP: 0, PASS: 1, WAIVED: 2, WARN: 3, FAIL: 4}
_CELL = {SKIP: "-", PASS: "ok", WAIVED: "waived", WARN: "WARN", FAIL: "FAIL"}


def _group(check: str) -> str:
    return check.split(".", 1)[0]


def table(results: Iterable[Mapping[str, t.Any]]) -> list[str]:
    """One line per host, one column per group of checks (cgroup, kernel, sysctl, ...)."""
    rows: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for result in results:
        group = _group(result["check"])
        if group not in columns:
            columns.append(group)
        cells = rows.setdefault(result["host"], {})
        current = cells.get(group, SKIP)
        if _RANK[result["status"]] >= _RANK[current]:
            cells[group] = result["status"]
    header = ["NODE", *(c.upper() for c in columns)]
    lines = [header] + [
        [host] + [_CELL[cells.get(c, SKIP)] for c in columns] for host, cells in rows.items()
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def problems(
    results: Iterable[Mapping[str, t.Any]], statuses: tuple[str, ...] = (FAIL, WARN)
) -> list[str]:
    """Each failed or warned check of each host: what was found, what is expected, the fix."""
    lines = []
    for result in results:
        if result["status"] in statuses:
            lines.append(
                f"{result['status'].upper()} {result['host']} {result['check']}: found "
                f"{result['found']}; expected {result['expected']}; fix: {result['fix']}"
            )
    return lines


def summary(results: Iterable[Mapping[str, t.Any]]) -> dict[str, t.Any]:
    counts = {status: 0 for status in _RANK}
    failed_hosts: set[str] = set()
    for result in results:
        counts[result["status"]] += 1
        if result["status"] == FAIL:
            failed_hosts.add(result["host"])
    return {"counts": counts, "failed_hosts": sorted(failed_hosts), "ok": counts[FAIL] == 0}
