# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The loans a run records for the lending report: one key per loan in the ConfigMap of the
month it began, twelve ConfigMaps kept a year, read back as the report's loans."""

from __future__ import annotations

import json
import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.loans import (
    loan_patches,
    loans_configmap,
    loans_of,
    month_write,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.lending import Loan

NOV_1 = 1793491200.0  # 2026-11-01T00:00:00Z
DEC_1 = 1796083200.0  # 2026-12-01T00:00:00Z


def handover(*entries: dict[str, t.Any]) -> dict[str, t.Any]:
    return {"nodes": list(entries)}


def test_a_lend_and_a_return_become_keys_of_their_months_configmaps() -> None:
    patches = loan_patches(
        [
            handover({"node": "int01", "result": "lent", "loan": {"lent": NOV_1 + 60, "reclaim": None, "returned": None}}),
            None,
            handover(
                {"node": "int02", "result": "free", "loan": {"lent": DEC_1 - 30, "reclaim": DEC_1 + 10, "returned": DEC_1 + 40}},
                {"node": "int03", "result": "free", "loan": None},
            ),
        ],
        "hpcops-handover",
        "backfill",
    )  # fmt: skip
    assert set(patches) == {("hpcops-handover-loans-11", "2026-11")}
    records = patches[("hpcops-handover-loans-11", "2026-11")]
    assert json.loads(records[f"int01.{int(NOV_1 + 60)}"]) == {
        "node": "int01", "partition": "backfill", "lent": NOV_1 + 60, "reclaim": None, "returned": None,
    }  # fmt: skip
    assert json.loads(records[f"int02.{int(DEC_1 - 30)}"])["returned"] == DEC_1 + 40
    assert loans_configmap("x", DEC_1) == ("x-loans-12", "2026-12")


def test_a_month_is_created_then_merged_into() -> None:
    records = {"int01.1": "{}"}
    kind, body = month_write(None, "x-loans-11", "slurm", "x", "2026-11", records) or ("", {})
    assert kind == "create" and body["data"] == records
    assert body["metadata"]["labels"]["hpcops.io/loans-month"] == "2026-11"
    existing = {
        "metadata": {"resourceVersion": "7", "labels": {"hpcops.io/loans-month": "2026-11"}},
        "data": {"int09.0": "{}"},
    }
    kind, patch = month_write(existing, "x-loans-11", "slurm", "x", "2026-11", records) or ("", {})
    assert kind == "patch" and patch["data"] == records, "the month's other keys are kept"
    assert patch["metadata"]["resourceVersion"] == "7"


def test_a_year_later_the_month_drops_what_it_held_and_an_older_loan_is_not_written() -> None:
    existing = {
        "metadata": {"resourceVersion": "7", "labels": {"hpcops.io/loans-month": "2025-11"}},
        "data": {"int09.0": "{}"},
    }
    kind, patch = month_write(existing, "x-loans-11", "slurm", "x", "2026-11", {"a.1": "{}"}) or (
        "",
        {},
    )
    assert kind == "patch" and patch["data"] == {"int09.0": None, "a.1": "{}"}
    newer = {"metadata": {"labels": {"hpcops.io/loans-month": "2027-11"}}, "data": {}}
    assert month_write(newer, "x-loans-11", "slurm", "x", "2026-11", {"a.1": "{}"}) is None


def test_the_report_reads_the_loans_back_and_names_what_it_cannot_read() -> None:
    record = {
        "node": "int01",
        "partition": "backfill",
        "lent": 10.0,
        "reclaim": 50.0,
        "returned": 60.0,
    }
    configmaps = [
        {"metadata": {"name": "x-loans-11"}, "data": {"int01.10": json.dumps(record), "bad.1": "{"}}
    ]
    loans, unreadable = loans_of(configmaps)
    assert loans == [Loan("int01", "backfill", 10.0, 50.0, 60.0)]
    assert len(unreadable) == 1 and unreadable[0].startswith("x-loans-11/bad.1: ")
