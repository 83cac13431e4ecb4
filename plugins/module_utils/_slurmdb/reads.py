# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_accounting_info returns of slurmdbd's and slurmctld's records (pure).

PRIVATE to the collection. The API versions disagree on numbers: v0.0.41 (Slurm 24.11)
gives some as plain numbers where later ones give {set, infinite, number} (measured on the
shares of both labs); both are read here.
"""

from __future__ import annotations

import typing as t

JSON = dict[str, t.Any]
# A time slurmdbd never set: a job that never started has start NO_VAL, one still running
# end 0 (measured, 26.05).
NO_VAL = 0xFFFFFFFE


def number(value: t.Any) -> float | None:
    """A number, from either form; None when unset or infinite."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    return float(value)


def moment(value: t.Any) -> int | None:
    """A Unix time, None when unset (0) or never (NO_VAL)."""
    found = number(value)
    if not found or found >= NO_VAL:
        return None
    return int(found)


def job_state(raw: t.Mapping[str, t.Any]) -> str:
    """The state sacct shows: an attempt a requeue ended is REQUEUED, though slurmdbd's
    answer lists it as ['PENDING', 'REQUEUED'] (measured, Slurm 26.05, v0.0.44)."""
    states = [str(state).upper() for state in (raw.get("state") or {}).get("current") or []]
    if "REQUEUED" in states:
        return "REQUEUED"
    return states[0] if states else "UNKNOWN"


def job_record(raw: t.Mapping[str, t.Any]) -> JSON:
    """An accounted job (one attempt of it), as sacct shows it."""
    times = raw.get("time") or {}
    exit_code = raw.get("exit_code") or {}
    return_code = number(exit_code.get("return_code"))
    nodes = str(raw.get("nodes") or "")
    return {
        "job_id": int(raw.get("job_id") or 0),
        "name": str(raw.get("name") or ""),
        "user": str(raw.get("user") or ""),
        "account": str(raw.get("account") or ""),
        "partition": str(raw.get("partition") or ""),
        "qos": str(raw.get("qos") or ""),
        "state": job_state(raw),
        "reason": str((raw.get("state") or {}).get("reason") or ""),
        "nodes": "" if nodes == "None assigned" else nodes,
        "submit": moment(times.get("submission")),
        "start": moment(times.get("start")),
        "end": moment(times.get("end")),
        "elapsed_s": int(number(times.get("elapsed")) or 0),
        "exit_code": int(return_code) if return_code is not None else None,
    }


def share_record(raw: t.Mapping[str, t.Any]) -> JSON:
    """One line of sshare: an account (ASSOCIATION) or a user under its account (USER)."""
    kinds = raw.get("type") or []
    is_user = "USER" in kinds
    fairshare = raw.get("fairshare") or {}
    return {
        "account": str(raw.get("parent") or "") if is_user else str(raw.get("name") or ""),
        "user": str(raw.get("name") or "") if is_user else "",
        "parent": str(raw.get("parent") or ""),
        "partition": str(raw.get("partition") or ""),
        "raw_shares": number(raw.get("shares")),
        "norm_shares": number(raw.get("shares_normalized")),
        "raw_usage": int(number(raw.get("usage")) or 0),
        "effective_usage": number(raw.get("effective_usage")),
        "fairshare": number(fairshare.get("factor")),
    }


def wanted(
    record: t.Mapping[str, t.Any], users: t.Sequence[str], accounts: t.Sequence[str]
) -> bool:
    """Whether a record passes the user and account filters (empty: all)."""
    return (not users or record.get("user") in users) and (
        not accounts or record.get("account") in accounts
    )
