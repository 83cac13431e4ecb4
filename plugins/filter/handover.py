# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the handover playbooks.

The documentation of each filter is in the YAML file of the same name beside this one.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    settings_problems,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.report import (
    metrics_text,
    run_summary,
    summary_line,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.jwt import token_expiry
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.slinky_tokens import (
    token_health,
    token_secret,
)

COLUMNS = (
    ("NODE", "node"),
    ("K8S", "kubernetes"),
    ("APPS", "app_pods"),
    ("JOURNAL", "journal"),
    ("FOR", "in_state_s"),
    ("SLURM", "slurm"),
    ("JOBS", "jobs"),
    ("OP", "op"),
    ("ADMIN DRAIN", "admin_drain"),
    ("CONDITION", "condition"),
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
    if key == "condition":
        return _condition_cell(row)
    return str(value) if value not in (None, "") else "-"


def _condition_cell(row: dict[str, t.Any]) -> str:
    """What disagrees on the node: its condition (EMERGENCY first), "left the pool", the
    Slinky operator's drain with its reason."""
    notes = []
    condition = row.get("condition") or ""
    if condition:
        notes.append(f"EMERGENCY {condition}" if row.get("emergency") else condition)
        if row.get("resolution"):
            notes[-1] += f" -> {row['resolution']}"
    if row.get("in_pool") is False:
        notes.append("left the pool")
    if row.get("operator_drain"):
        notes.append(f"drained by Slinky: {row['operator_drain']}")
    return "; ".join(notes) or "-"


def handover_status_table(rows: t.Any) -> list[str]:
    """The status rows of handover_plan as the lines of a fixed-width table."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise AnsibleFilterError(
            "handover_status_table: expected the `status` list that handover_plan returns"
        )
    return _aligned(
        [header for header, _key in COLUMNS],
        [[_cell(row, key) for _header, key in COLUMNS] for row in rows],
    )


# The plan's decisions in the order a run acts on them.
PLAN_DECISIONS = (("resume", "resume"), ("reclaim", "reclaim"), ("lend", "lend"))
# The reasons of nodes the plan never considers: not shown in the pool's plan.
OUTSIDE_THE_POOL = ("not in the lendable pool",)


def handover_plan_table(plan: t.Any) -> list[str]:
    """What the next run would do with each pool node and why, as the lines of a table;
    under lend_when demand, Slurm's demand first."""
    if not isinstance(plan, dict) or not all(
        isinstance(plan.get(key), list) for key in ("lend", "reclaim", "resume", "left_alone")
    ):
        raise AnsibleFilterError(
            "handover_plan_table: expected the result of handover_plan (lend, reclaim, "
            "resume and left_alone)"
        )
    lines = _demand_lines(plan.get("slurm_demand"))
    cells = [
        [str(row.get("node")), decision, str(row.get("reason"))]
        for key, decision in (*PLAN_DECISIONS, ("left_alone", "-"))
        for row in plan[key]
        if row.get("reason") not in OUTSIDE_THE_POOL
    ]
    return lines + _aligned(["NODE", "NEXT RUN", "WHY"], sorted(cells))


def _demand_lines(demand: t.Any) -> list[str]:
    """Slurm's demand in a few lines (none when the plan did not read it: lend_when idle)."""
    if not isinstance(demand, dict):
        return []
    lines = [
        f"Slurm: {demand.get('pending_jobs', 0)} pending job(s) in the lendable partitions, "
        f"{demand.get('fitting_jobs', 0)} a lent node would start; "
        f"{demand.get('nodes', 0)} node(s) to lend for them"
        + (
            f", lent node(s) {', '.join(demand['lent_nodes_used'])} already idle for them"
            if demand.get("lent_nodes_used")
            else ""
        )
    ]
    if demand.get("unplaced_count"):
        lines.append(
            f"  {demand['unplaced_count']} fitting job(s) need more nodes than this run can "
            f"lend, e.g. {', '.join(map(str, demand.get('unplaced_jobs') or []))}"
        )
    for skipped in demand.get("skipped") or []:
        examples = ", ".join(map(str, skipped.get("examples") or []))
        lines.append(f"  {skipped.get('jobs')} skipped: {skipped.get('reason')} (e.g. {examples})")
    return lines


def _aligned(headers: list[str], cells: list[list[str]]) -> list[str]:
    """Lines of a fixed-width table, two spaces between columns."""
    lines = [headers, *cells]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    ]


def slinky_token_table(rows: t.Any) -> list[str]:
    """The rows of slinky_token_health as the lines of a fixed-width table."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise AnsibleFilterError("slinky_token_table: expected what slinky_token_health returns")
    return _aligned(
        ["TOKEN", "USER", "SECRET", "LIFETIME", "EXPIRES IN", "STATE"],
        [
            [
                str(row.get("token")),
                str(row.get("user")),
                str(row.get("secret")),
                _duration(row.get("lifetime_s")),
                _duration(row["expires_in_s"]) if (row.get("expires_in_s") or 0) > 0 else "-",
                str(row.get("state")),
            ]
            for row in rows
        ],
    )


def handover_run_summary(
    handovers: t.Any,
    *,
    run_id: str,
    started: float,
    finished: float,
    lease: t.Any = None,
    pool: t.Any = None,
    errors: t.Any = (),
    action: str = "",
    requested: t.Any = (),
    warnings: t.Any = (),
    attention: t.Any = (),
    trigger: t.Any = None,
    conditions: t.Any = (),
) -> dict[str, t.Any]:
    """The summary of one run from the results its tasks registered."""
    if not isinstance(handovers, list):
        raise AnsibleFilterError("handover_run_summary: expected a list of node_handover results")
    if isinstance(errors, str):
        errors = [errors]
    try:
        return run_summary(
            run_id=run_id,
            started=float(started),
            finished=float(finished),
            handovers=[h if isinstance(h, dict) else None for h in handovers],
            lease=lease if isinstance(lease, dict) else None,
            pool=pool if isinstance(pool, list) else None,
            errors=errors,
            action=str(action or ""),
            requested=[str(node) for node in requested or ()],
            warnings=[warnings] if isinstance(warnings, str) else list(warnings or ()),
            attention=[attention] if isinstance(attention, str) else list(attention or ()),
            trigger=trigger,
            conditions=[c for c in conditions or () if isinstance(c, dict)],
        )
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"handover_run_summary: {err}") from err


def _summary(summary: t.Any, name: str) -> dict[str, t.Any]:
    if not isinstance(summary, dict) or "outcome" not in summary:
        raise AnsibleFilterError(f"{name}: expected what handover_run_summary returns")
    return summary


def handover_metrics(summary: t.Any, cluster: str = "") -> str:
    """A run summary in the Prometheus text format."""
    return metrics_text(_summary(summary, "handover_metrics"), cluster)


def handover_summary_line(summary: t.Any) -> str:
    """A run summary as one line."""
    return summary_line(_summary(summary, "handover_summary_line"))


def jwt_expiry(token: t.Any) -> float | None:
    """When a JWT expires (its exp claim), or None; the signature is not checked."""
    return token_expiry(token) if isinstance(token, str) else None


def slinky_token_secret(token: t.Any) -> dict[str, str]:
    """Where the Slinky operator keeps a Token's JWT: the Secret's name and key."""
    if not isinstance(token, dict) or not isinstance(token.get("metadata"), dict):
        raise AnsibleFilterError(
            "slinky_token_secret: expected a Token object (k8s_info's resources)"
        )
    name, key = token_secret(token)
    return {"name": name, "key": key}


def slinky_token_health(tokens: t.Any, secrets: t.Any, now: t.Any) -> list[dict[str, t.Any]]:
    """Each Token's user, lifetime, Secret, JWT expiry and state (ok, late, expired, missing,
    unreadable) with what to do; never the JWT."""
    if not isinstance(tokens, list) or not isinstance(secrets, list):
        raise AnsibleFilterError(
            "slinky_token_health: expected the Token objects and the Secret objects "
            "(k8s_info's resources)"
        )
    try:
        when = float(now)
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"slinky_token_health: now must be Unix time, got {now!r}"
        ) from None
    return token_health(tokens, secrets, when)


def handover_settings_problems(settings: t.Any) -> list[str]:
    """Every problem of the handover role's settings, each naming the variable and the fix."""
    return settings_problems(settings)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "handover_status_table": handover_status_table,
            "handover_plan_table": handover_plan_table,
            "handover_run_summary": handover_run_summary,
            "handover_metrics": handover_metrics,
            "handover_summary_line": handover_summary_line,
            "jwt_expiry": jwt_expiry,
            "handover_settings_problems": handover_settings_problems,
            "slinky_token_secret": slinky_token_secret,
            "slinky_token_health": slinky_token_health,
            "slinky_token_table": slinky_token_table,
        }
