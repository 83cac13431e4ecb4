# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The accounting settings as users write them, and where each lives in the API's records.

PRIVATE to the collection. Settings keep sacctmgr's names in snake case (GrpTRES is
`grp_tres`, MaxWall is `max_wall`), so a site's `sacctmgr` knowledge carries over. A limit
of -1 removes it, as in sacctmgr. TRES limits are dicts (`{cpu: 64, mem: 256G, gres/gpu: 4}`)
or sacctmgr's strings (`cpu=64,mem=256G,gres/gpu=4`); memory is counted in MiB, as Slurm
counts it. The paths were read from slurmrestd's OpenAPI description (v0.0.41 to v0.0.45
agree on them) and each is checked against `sacctmgr show` in the lab's tests.
"""

from __future__ import annotations

import re
import typing as t

JSON = dict[str, t.Any]

# A limit given as -1 (or "unlimited") is removed.
NO_LIMIT = -1

# kind of value: "count" (a whole number), "minutes" (a duration), "tres" (a TRES dict),
# "list" (names), "text".
# Measured against `sacctmgr show assoc` on Slurm 24.11 (v0.0.41) and 26.05 (v0.0.45): the
# API's names do not say which limit they are (max.jobs.per.count is GrpJobs).
ASSOCIATION_LIMITS: dict[str, tuple[str, str]] = {
    "grp_jobs": ("max.jobs.per.count", "count"),
    "grp_jobs_accrue": ("max.jobs.per.accruing", "count"),
    "grp_submit_jobs": ("max.jobs.per.submitted", "count"),
    "grp_tres": ("max.tres.total", "tres"),
    "grp_tres_mins": ("max.tres.group.minutes", "tres"),
    "grp_tres_run_mins": ("max.tres.group.active", "tres"),
    "grp_wall": ("max.per.account.wall_clock", "minutes"),
    "max_jobs": ("max.jobs.active", "count"),
    "max_jobs_accrue": ("max.jobs.accruing", "count"),
    "max_submit_jobs": ("max.jobs.total", "count"),
    "max_tres_mins_per_job": ("max.tres.minutes.per.job", "tres"),
    "max_tres_run_mins": ("max.tres.minutes.total", "tres"),
    "max_tres_per_job": ("max.tres.per.job", "tres"),
    "max_tres_per_node": ("max.tres.per.node", "tres"),
    "max_wall": ("max.jobs.per.wall_clock", "minutes"),
}
ASSOCIATION_SETTINGS: dict[str, tuple[str, str]] = {
    **ASSOCIATION_LIMITS,
    "fairshare": ("shares_raw", "shares"),
    "priority": ("priority", "count"),
    "qos": ("qos", "list"),
    "default_qos": ("default.qos", "text"),
}

# Measured against `sacctmgr show qos` the same way.
QOS_SETTINGS: dict[str, tuple[str, str]] = {
    "description": ("description", "text"),
    "priority": ("priority", "count"),
    "flags": ("flags", "flags"),
    "preempt": ("preempt.list", "list"),
    "preempt_mode": ("preempt.mode", "preempt_mode"),
    "preempt_exempt_time": ("preempt.exempt_time", "count"),
    "usage_factor": ("usage_factor", "float"),
    "grace_time": ("limits.grace_time", "seconds"),
    "grp_jobs": ("limits.max.active_jobs.count", "count"),
    "grp_jobs_accrue": ("limits.max.active_jobs.accruing", "count"),
    "grp_submit_jobs": ("limits.max.jobs.count", "count"),
    "grp_tres": ("limits.max.tres.total", "tres"),
    "grp_tres_mins": ("limits.max.tres.minutes.total", "tres"),
    "grp_tres_run_mins": ("limits.max.tres.minutes.per.qos", "tres"),
    "grp_wall": ("limits.max.wall_clock.per.qos", "minutes"),
    "max_jobs_per_user": ("limits.max.jobs.active_jobs.per.user", "count"),
    "max_jobs_per_account": ("limits.max.jobs.active_jobs.per.account", "count"),
    "max_submit_jobs_per_user": ("limits.max.jobs.per.user", "count"),
    "max_submit_jobs_per_account": ("limits.max.jobs.per.account", "count"),
    "max_tres_per_job": ("limits.max.tres.per.job", "tres"),
    "max_tres_per_node": ("limits.max.tres.per.node", "tres"),
    "max_tres_per_user": ("limits.max.tres.per.user", "tres"),
    "max_tres_per_account": ("limits.max.tres.per.account", "tres"),
    "max_tres_mins_per_job": ("limits.max.tres.minutes.per.job", "tres"),
    "max_wall": ("limits.max.wall_clock.per.job", "minutes"),
    "min_tres_per_job": ("limits.min.tres.per.job", "tres"),
}
# Settings an older API has no field for: the first version that has one.
QOS_SINCE = {"grp_submit_jobs": "v0.0.42", "grp_tres_mins": "v0.0.42"}

# sacctmgr's QoS flags and the API's names for them; either may be written.
QOS_FLAGS = {
    "DenyOnLimit": "DENY_LIMIT",
    "EnforceUsageThreshold": "ENFORCE_USAGE_THRESHOLD",
    "NoDecay": "NO_DECAY",
    "NoReserve": "NO_RESERVE",
    "OverPartQOS": "OVERRIDE_PARTITION_QOS",
    "PartitionMaxNodes": "PARTITION_MAXIMUM_NODE",
    "PartitionMinNodes": "PARTITION_MINIMUM_NODE",
    "PartitionTimeLimit": "PARTITION_TIME_LIMIT",
    "RequiresReservation": "REQUIRED_RESERVATION",
    "UsageFactorSafe": "USAGE_FACTOR_SAFE",
    "Relative": "RELATIVE",
}
PREEMPT_MODES = ("SUSPEND", "REQUEUE", "CANCEL", "GANG")
# The mode of a QoS that takes the cluster's PreemptMode: sacctmgr shows it as "cluster".
PREEMPT_MODE_CLUSTER = "DISABLED"

ADMIN_LEVELS = ("None", "Operator", "Administrator")

MEMORY_UNITS = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
TRES_ITEM = re.compile(r"^\s*([A-Za-z]+(?:/[\w.:-]+)?)\s*=\s*(-?\d+)\s*([MGT]?)\s*$", re.IGNORECASE)


class FieldError(ValueError):
    """A setting that cannot be sent; the message names it and says what is accepted."""


# -- TRES ---------------------------------------------------------------------------


def parse_tres(value: t.Any, where: str) -> dict[str, int]:
    """A TRES limit as {"cpu": 64, "mem": 262144, "gres/gpu": 4}, memory in MiB; -1 means
    no limit on that resource."""
    if isinstance(value, str):
        items: list[tuple[str, t.Any]] = []
        for part in (p for p in value.split(",") if p.strip()):
            if "=" not in part:
                raise FieldError(
                    f"{where}: {part.strip()!r} is not TYPE=COUNT; write for example "
                    "'cpu=64,mem=256G,gres/gpu=4'"
                )
            key, amount = part.split("=", 1)
            items.append((key.strip(), amount.strip()))
    elif isinstance(value, dict):
        items = [(str(key), amount) for key, amount in value.items()]
    else:
        raise FieldError(
            f"{where} must be a dict such as {{cpu: 64, mem: 256G}} or a string such as "
            f"'cpu=64,mem=256G', not {type(value).__name__}"
        )
    tres: dict[str, int] = {}
    for key, amount in items:
        match = TRES_ITEM.match(f"{key}={amount}")
        if not match:
            raise FieldError(
                f"{where}: {key}={amount} is not a TRES limit; give a resource (cpu, mem, "
                "node, billing, gres/gpu) and a whole number, memory with M, G or T"
            )
        name, count, unit = match.group(1).lower(), int(match.group(2)), match.group(3).upper()
        if unit and name != "mem":
            raise FieldError(f"{where}: {key}={amount}: only mem takes a unit (M, G, T)")
        tres[name] = count if count < 0 else count * MEMORY_UNITS[unit]
    return tres


def tres_from_api(items: t.Any) -> dict[str, int]:
    """The API's [{type, name, count}] as {"type[/name]": count}."""
    tres: dict[str, int] = {}
    for item in items or []:
        if not isinstance(item, dict) or item.get("count") is None:
            continue
        key = item.get("type", "")
        if item.get("name"):
            key = f"{key}/{item['name']}"
        tres[key] = int(item["count"])
    return tres


def tres_to_api(tres: dict[str, int]) -> list[JSON]:
    items = []
    for key, count in sorted(tres.items()):
        kind, name = key.split("/", 1) if "/" in key else (key, "")
        item: JSON = {"type": kind, "count": count}
        if name:
            item["name"] = name
        items.append(item)
    return items


def tres_text(tres: dict[str, int]) -> str:
    """sacctmgr's way of writing it: cpu=64,mem=262144,gres/gpu=4."""
    return ",".join(f"{key}={count}" for key, count in sorted(tres.items()))


# -- one value --------------------------------------------------------------------------

DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_minutes(value: t.Any, where: str) -> int:
    """Minutes from a number or Slurm's time format (minutes, minutes:seconds,
    hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds),
    seconds rounded up; -1 or "unlimited" removes the limit."""
    if isinstance(value, bool):
        raise FieldError(f"{where} must be minutes or a duration such as '2-00:00:00'")
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text in ("-1", "unlimited", "infinite"):
        return NO_LIMIT
    match = DURATION.match(text)
    if not match:
        raise FieldError(
            f"{where}: {value!r} is not a duration; write minutes (90), hours:minutes:seconds "
            "(01:30:00) or days-hours:minutes:seconds (2-00:00:00)"
        )
    days, first, second, third = match.groups()
    parts = [int(part) for part in (first, second, third) if part is not None]
    if days is not None:
        hours, minutes, seconds = [*parts, 0, 0][:3]
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(parts) == 3:
        total = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:
        total = parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)
    return -(-total // 60)


def canonical(kind: str, value: t.Any, where: str) -> t.Any:
    """A wanted value in the form compared with what the API holds."""
    if kind == "tres":
        return parse_tres(value, where)
    if kind == "minutes":
        return parse_minutes(value, where)
    if kind in ("count", "shares", "seconds"):
        return _whole_number(kind, value, where)
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise FieldError(f"{where} must be a number, not {value!r}") from None
    if kind in ("list", "flags", "preempt_mode"):
        return _names(kind, value, where)
    return "" if value is None else str(value)


def _whole_number(kind: str, value: t.Any, where: str) -> int:
    if isinstance(value, str) and value.strip().lower() in ("unlimited", "infinite"):
        value = NO_LIMIT
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise FieldError(f"{where} must be a whole number, not {value!r}") from None
    if kind != "count" and number < 0:
        # Not a limit: nothing to remove.
        raise FieldError(f"{where} must be 0 or more, not {number}")
    if number < NO_LIMIT:
        raise FieldError(f"{where} must be 0 or more, or -1 to remove it, not {number}")
    return number


def _names(kind: str, value: t.Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    items = [str(item).strip() for item in value]
    if any(not item for item in items):
        # An empty name in a list crashes slurmrestd 24.11 and 26.05 (measured).
        raise FieldError(f"{where} has an empty name; give names, or [] for none")
    if kind == "flags":
        items = [_qos_flag(item, where) for item in items]
    elif kind == "preempt_mode":
        items = [_preempt_mode(item, where) for item in items]
        items = [item for item in items if item != PREEMPT_MODE_CLUSTER]
    return sorted(set(items))


def _qos_flag(flag: str, where: str) -> str:
    by_name = {name.lower(): api for name, api in QOS_FLAGS.items()}
    by_name.update({api.lower(): api for api in QOS_FLAGS.values()})
    try:
        return by_name[flag.lower()]
    except KeyError:
        raise FieldError(
            f"{where}: unknown QoS flag {flag!r}; known: {', '.join(QOS_FLAGS)}"
        ) from None


def _preempt_mode(mode: str, where: str) -> str:
    if mode.upper() in PREEMPT_MODES:
        return mode.upper()
    if mode.lower() in ("cluster", "off", PREEMPT_MODE_CLUSTER.lower()):
        return PREEMPT_MODE_CLUSTER
    raise FieldError(
        f"{where}: unknown preempt mode {mode!r}; give {', '.join(PREEMPT_MODES)}, or "
        "[] for the cluster's PreemptMode"
    )


def get_path(record: JSON, path: str) -> t.Any:
    value: t.Any = record
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def set_path(record: JSON, path: str, value: t.Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        record = record.setdefault(key, {})
    record[keys[-1]] = value


def from_api(kind: str, raw: t.Any) -> t.Any:
    """What the API holds, in the form of `canonical`; a missing or infinite limit is -1."""
    if kind == "tres":
        return tres_from_api(raw)
    if kind in ("count", "minutes", "shares", "seconds", "float"):
        if isinstance(raw, dict):
            if raw.get("infinite") or not raw.get("set"):
                return NO_LIMIT
            raw = raw.get("number")
        if raw is None:
            return NO_LIMIT
        return float(raw) if kind == "float" else int(raw)
    if kind in ("list", "flags"):
        return sorted({str(item) for item in raw or []})
    if kind == "preempt_mode":
        return sorted({str(item) for item in raw or []} - {PREEMPT_MODE_CLUSTER})
    return "" if raw is None else str(raw)


def to_api(kind: str, value: t.Any) -> t.Any:
    """The API's form of a canonical value."""
    if kind == "tres":
        return tres_to_api(value)
    if kind in ("count", "minutes", "float"):
        if value == NO_LIMIT:
            return {"set": True, "infinite": True, "number": 0}
        return {"set": True, "infinite": False, "number": value}
    if kind in ("list", "flags"):
        return list(value)
    if kind == "preempt_mode":
        return list(value) or [PREEMPT_MODE_CLUSTER]
    return value


def merged_tres(current: dict[str, int], wanted: dict[str, int]) -> dict[str, int]:
    """The TRES a limit holds after an update that names `wanted`: sacctmgr's rule, each
    named resource set, -1 removes it, the others stay."""
    merged = {**current, **wanted}
    return {key: count for key, count in merged.items() if count != NO_LIMIT}
