# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the handover playbooks.

The documentation of each filter is in the YAML file of the same name beside this one.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

COLUMNS = (
    ("NODE", "node"),
    ("K8S", "kubernetes"),
    ("APPS", "app_pods"),
    ("JOURNAL", "journal"),
    ("FOR", "in_state_s"),
    ("SLURM", "slurm"),
    ("JOBS", "jobs"),
    ("OP", "op"),
)


def _duration(seconds: t.Any) -> str:
    """45s, 12m, 2h05m, 3d04h: two units at most, as people read uptimes."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _cell(row: dict[str, t.Any], key: str) -> str:
    value = row.get(key)
    if key == "in_state_s":
        return _duration(value)
    if key == "kubernetes":
        flags = [str(value)]
        if not row.get("schedulable", True):
            flags.append("cordoned")
        if row.get("never_touch"):
            flags.append("never-touch")
        return ",".join(flags)
    if (
        key == "journal"
        and row.get("journal") == "reclaiming"
        and row.get("deadline_in_s") is not None
    ):
        return f"reclaiming (deadline {row['deadline_in_s']}s)"
    if key == "jobs":
        return str(len(value or []))
    return str(value) if value not in (None, "") else "-"


def handover_status_table(rows: t.Any) -> list[str]:
    """The status rows of handover_plan as the lines of a fixed-width table."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise AnsibleFilterError(
            "handover_status_table: expected the `status` list that handover_plan returns"
        )
    cells = [[header for header, _key in COLUMNS]]
    cells += [[_cell(row, key) for _header, key in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"handover_status_table": handover_status_table}
