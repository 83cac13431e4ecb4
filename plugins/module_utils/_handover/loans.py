# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The loans the handover runs record, for the lending report (pure).

PRIVATE to the collection. A run that lends or returns nodes records each loan as one key
of a ConfigMap of the month it began, beside the run's status ConfigMap: key
`<node>.<lent, Unix seconds>`, value the loan as JSON. A lend writes the key with no
reclaim and no return; the return writes it again whole. There are twelve such
ConfigMaps, one per calendar month (<report>-loans-01 to -12), so the runner's rights
name them all and a year of loans is kept: the first loan of a month drops what that
ConfigMap held of the same month a year before. One merge patch per month a run touches;
no run rewrites another's keys.
"""

from __future__ import annotations

import json
import time
import typing as t
from collections.abc import Iterable, Mapping

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.lending import Loan

JSON = dict[str, t.Any]
# The label of the loan ConfigMaps, so the report finds every month's.
LOANS_LABEL = "hpcops.io/handover-loans"


# Which year's month a loan ConfigMap holds (YYYY-MM, UTC).
MONTH_LABEL = "hpcops.io/loans-month"


def loans_configmap(base: str, lent: float) -> tuple[str, str]:
    """The ConfigMap of the calendar month a loan began, and that month (YYYY-MM, UTC)."""
    month = time.strftime("%Y-%m", time.gmtime(lent))
    return f"{base}-loans-{month[5:]}", month


def loan_key(node: str, lent: float) -> str:
    """A ConfigMap key (letters, digits, '-', '_', '.'): Node names are DNS names."""
    return f"{node}.{int(lent)}"


def loan_patches(
    handovers: Iterable[Mapping[str, t.Any] | None], base: str, partition: str
) -> dict[tuple[str, str], dict[str, str]]:
    """(ConfigMap name, month) -> the keys to merge into it, from the handovers' results."""
    patches: dict[tuple[str, str], dict[str, str]] = {}
    for handover in handovers:
        for entry in (handover or {}).get("nodes") or []:
            loan = entry.get("loan")
            if not loan or loan.get("lent") is None:
                continue
            node = str(entry.get("node", ""))
            lent = float(loan["lent"])
            record = {
                "node": node,
                "partition": partition,
                "lent": lent,
                "reclaim": loan.get("reclaim"),
                "returned": loan.get("returned"),
            }
            text = json.dumps(record, sort_keys=True, separators=(",", ":"))
            patches.setdefault(loans_configmap(base, lent), {})[loan_key(node, lent)] = text
    return patches


def month_write(
    existing: Mapping[str, t.Any] | None,
    name: str,
    namespace: str,
    base: str,
    month: str,
    records: Mapping[str, str],
) -> tuple[str, JSON] | None:
    """How to write a month's records: ("create", body) when its ConfigMap does not exist,
    ("patch", merge patch) when it does (the same month a year before: its keys dropped,
    with the resourceVersion read so a race is refused), None when it holds a later month
    (the loans are older than the year kept)."""
    labels = {
        LOANS_LABEL: base,
        MONTH_LABEL: month,
        "app.kubernetes.io/managed-by": "hpcops.slinky",
    }
    if existing is None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": dict(records),
        }
        return "create", body
    meta = existing.get("metadata") or {}
    held = (meta.get("labels") or {}).get(MONTH_LABEL, "")
    if held > month:
        return None
    data: dict[str, str | None] = dict(records)
    if held != month:
        data = {**{key: None for key in existing.get("data") or {}}, **data}
    patch = {
        "metadata": {"labels": labels, "resourceVersion": meta.get("resourceVersion")},
        "data": data,
    }
    return "patch", patch


def loans_of(configmaps: Iterable[Mapping[str, t.Any]]) -> tuple[list[Loan], list[str]]:
    """The loans the ConfigMaps hold, and what could not be read (key: why)."""
    loans: list[Loan] = []
    unreadable: list[str] = []
    for configmap in configmaps:
        name = (configmap.get("metadata") or {}).get("name", "")
        for key, text in sorted((configmap.get("data") or {}).items()):
            try:
                record = json.loads(text)
                loans.append(
                    Loan(
                        node=str(record["node"]),
                        partition=str(record.get("partition") or ""),
                        lent=float(record["lent"]),
                        reclaim=_optional(record.get("reclaim")),
                        returned=_optional(record.get("returned")),
                    )
                )
            except (ValueError, KeyError, TypeError) as err:
                unreadable.append(f"{name}/{key}: {err}")
    return loans, unreadable


def _optional(value: t.Any) -> float | None:
    return None if value is None else float(value)
