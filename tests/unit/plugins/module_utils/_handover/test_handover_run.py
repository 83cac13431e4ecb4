# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The order of one whole run (module_utils/_handover/run.py), its I/O replaced by a
recorder: which step comes when, what stops the run, and that the Lease is always given
back. The protocol's steps themselves run for real in tests/integration (test_handover*)."""

from __future__ import annotations

import dataclasses
import typing as t
from types import SimpleNamespace

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._handover import run as run_module
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import Settings
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import Policy
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.run import (
    HandoverRun,
    RunRequest,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import KubernetesError
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import LeaseRequest

PLAN = {
    "resume": [{"node": "int05", "reason": "finish the reclaiming of op 1"}],
    "reclaim": [{"node": "int01", "reason": "2 pending pod(s)"}],
    "orphans": [{"node": "gone01", "reason": "no Node"}],
    "lend": [{"node": "int02", "reason": "idle"}],
    "idle_marks": {"int03": 1700000000.0},
    "attention": ["gone01: Slurm node of a deleted Node"],
    "attention_items": [
        {
            "node": "gone01",
            "condition": "orphan_record",
            "line": "gone01: Slurm node of a deleted Node",
        }
    ],
    "reconcile": [],
    "conditions": [],
    "status": [{"node": "int01", "journal": "lent"}],
}


class Recorder:
    """Stands in for the run's I/O and writes down each call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, failing: str = "") -> None:
        self.calls: list[tuple[str, ...]] = []
        self.failing = failing  # the action whose first node fails

        def hand_over(
            _kube: t.Any,
            _slurm: t.Any,
            _settings: t.Any,
            action: str,
            nodes: list[str],
            **kw: t.Any,
        ) -> dict[str, t.Any]:
            names = list(kw.get("idle_marks") or {}) if action == "mark_idle" else list(nodes)
            self.calls.append((action, *names, kw.get("reason", "")))
            result = "failed" if action == self.failing else "done"
            outcomes = [
                SimpleNamespace(node=name, result=result, message="it broke") for name in names
            ]
            return {
                "changed": True,
                "nodes": [
                    {"node": name, "result": result, "steps": [], "message": "it broke"}
                    for name in names
                ],
                "outcomes": outcomes,
            }

        def lease(
            _client: t.Any, _request: t.Any, want: str = "", *_a: t.Any, **_k: t.Any
        ) -> dict[str, t.Any]:
            self.calls.append(("lease", want or "acquired"))
            return {"acquired": True, "holder": "run-1"}

        monkeypatch.setattr(run_module, "hand_over", hand_over)
        burst = {"metadata": {"name": "slurm-worker-burst"}}
        monkeypatch.setattr(run_module, "lendable_nodesets_of", lambda *a: [burst])
        monkeypatch.setattr(
            run_module,
            "check_against_cluster",
            lambda *a, **k: (
                self.calls.append(("check", *(n["metadata"]["name"] for n in k["nodesets"])))
                or {"refusals": [], "lendable_partitions": [], "lendable_nodesets": ["burst"]}
            ),
        )

        def read_plan(*_a: t.Any, **kw: t.Any) -> dict[str, t.Any]:
            # The plan takes the NodeSets the check read instead of listing them again.
            self.calls.append(("plan", *(n["metadata"]["name"] for n in kw["nodesets"])))
            return dict(PLAN)

        monkeypatch.setattr(run_module, "read_plan", read_plan)
        monkeypatch.setattr(run_module, "acquire_lease", lease)
        monkeypatch.setattr(run_module, "lease_attempt", lease)
        monkeypatch.setattr(run_module, "pool_journals", lambda *a: [])
        monkeypatch.setattr(
            run_module,
            "apply_object",
            lambda *a: self.calls.append(("record",)) or {"metadata": {"uid": "u"}},
        )
        monkeypatch.setattr(
            run_module, "write_object", lambda *a, **k: self.calls.append(("event",))
        )

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


def a_run(action: str, nodes: tuple[str, ...] = ()) -> HandoverRun:
    settings = Settings(
        markers=HandoverMarkers(), policy=Policy(pool_selector={"p": "x"}), by="run-1"
    )
    request = RunRequest(
        action=action,
        run_id="run-1",
        lease=LeaseRequest("lease", "slurm", "run-1"),
        nodes=nodes,
        reason="reclaim.yml",
        report_configmap="status",
    )
    return HandoverRun(SimpleNamespace(client=None), None, settings, request, sleep=lambda _s: None)


def test_a_rebalance_does_each_step_in_the_protocols_order_and_records_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    result = a_run("rebalance").execute()
    assert recorder.names() == [
        "check",
        "lease",
        "plan",
        "mark_idle",
        "resume",
        "reclaim",
        "clean_orphans",
        "lend",
        "lease",  # released
        "record",
        "event",
    ]
    # The plan's reason goes with its reclaim; the plan's attention into the summary.
    assert ("reclaim", "int01", "2 pending pod(s)") in recorder.calls
    assert ("check", "slurm-worker-burst") in recorder.calls
    assert ("plan", "slurm-worker-burst") in recorder.calls
    assert "gone01: Slurm node of a deleted Node" in result["summary"]["warnings"]
    assert result["error"] == "" and result["recorded"]


def test_named_nodes_are_handed_over_without_a_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)
    result = a_run("reclaim", ("int01", "int02")).execute()
    assert recorder.names() == ["check", "lease", "reclaim", "lease", "record", "event"]
    assert ("reclaim", "int01", "int02", "reclaim.yml") in recorder.calls
    assert result["requested"] == ["int01", "int02"] and "plan" not in result


def test_a_failed_step_ends_the_steps_but_the_lease_is_released_and_the_run_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch, failing="reclaim")
    result = a_run("rebalance").execute()
    names = recorder.names()
    assert "clean_orphans" not in names and "lend" not in names
    assert names[-3:] == ["lease", "record", "event"]
    assert result["error"] == "int01: failed: it broke"
    assert result["outcome"] == "failed"


def test_a_plan_that_cannot_be_read_names_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)

    def unreadable(*_a: t.Any, **_k: t.Any) -> dict[str, t.Any]:
        raise KubernetesError("cannot list Node (v1): HTTP 503")

    monkeypatch.setattr(run_module, "read_plan", unreadable)
    result = a_run("lend").execute()
    assert result["error"] == "plan: cannot list Node (v1): HTTP 503"
    assert recorder.names()[-3:] == ["lease", "record", "event"]


def test_a_release_that_keeps_failing_is_retried_then_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    tries: list[int] = []

    def release(*_a: t.Any, **_k: t.Any) -> dict[str, t.Any]:
        tries.append(1)
        raise KubernetesError("cannot read Lease lease: connection refused")

    monkeypatch.setattr(run_module, "lease_attempt", release)
    result = a_run("reclaim", ("int01",)).execute()
    assert len(tries) == run_module.RELEASE_TRIES
    assert result["error"].startswith("the Lease could not be released (cannot read Lease")
    assert recorder.names()[-2:] == ["record", "event"]


def test_a_held_lease_does_nothing_and_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)
    monkeypatch.setattr(
        run_module,
        "acquire_lease",
        lambda *a, **k: {"acquired": False, "holder": "other", "expires_in": 40.0, "waited_s": 0},
    )
    result = a_run("lend", ("int01",)).execute()
    assert recorder.names() == ["check"]
    assert result["outcome"] == "lease_held" and not result["recorded"]
    assert result["error"].startswith("other holds the handover Lease for 40.0 s more")
    # A rebalance that finds it held is no failure: the next one comes soon.
    assert a_run("rebalance").execute()["error"] == ""


def test_nodes_whose_evidence_disagrees_are_resolved_after_resumes_and_before_new_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    conditions = [
        {
            "node": "int07",
            "condition": "slurm_and_apps",
            "resolution": "reclaim",
            "emergency": True,
            "evidence": "journal free, lend label",
        },
        {
            "node": "int08",
            "condition": "slurmd_without_journal",
            "resolution": "lend",
            "emergency": False,
            "evidence": "journal free, lend label, slurmd pod, Slurm up",
        },
    ]
    plan = {
        **PLAN,
        "reconcile": [
            {"node": "int07", "condition": "slurm_and_apps", "action": "reclaim"},
            {"node": "int08", "condition": "slurmd_without_journal", "action": "lend"},
        ],
        "conditions": conditions,
    }
    seen: dict[str, t.Any] = {}
    original = run_module.hand_over

    def hand_over(*a: t.Any, **kw: t.Any) -> dict[str, t.Any]:
        seen.update(kw.get("conditions") or {})
        return original(*a, **kw)

    monkeypatch.setattr(run_module, "read_plan", lambda *a, **k: dict(plan))
    monkeypatch.setattr(run_module, "hand_over", hand_over)
    result = a_run("rebalance").execute()
    actions = [call[:2] for call in recorder.calls if call[0] in ("resume", "lend", "reclaim")]
    assert actions == [
        ("resume", "int05"),
        ("lend", "int08"),  # the lend the evidence showed, finished
        ("reclaim", "int07"),  # the emergency, given back
        ("reclaim", "int01"),
        ("lend", "int02"),
    ]
    # Each node's handover knows its condition, for its journal and its Event.
    assert seen["int07"] == ("slurm_and_apps", "slurm_and_apps: journal free, lend label")
    assert result["summary"]["emergencies"] == ["int07"]
    assert "EMERGENCY slurm_and_apps on int07" in result["summary_line"]


def test_the_runs_messages_name_the_settings_as_the_user_wrote_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Recorder(monkeypatch)
    monkeypatch.setattr(
        run_module,
        "acquire_lease",
        lambda *a, **k: {"acquired": False, "holder": "other", "expires_in": 40.0, "waited_s": 0},
    )
    run = a_run("lend", ("int01",))
    run.request = dataclasses.replace(
        run.request, setting_names={"lease.wait_s": "handover_lease_wait_s"}
    )
    error = run.execute()["error"]
    assert "handover_lease_wait_s" in error and " lease.wait_s" not in error, error


def test_the_loans_a_run_began_or_ended_are_merged_into_their_months(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    loans = {"int02": {"lent": 1793491260.0, "reclaim": None, "returned": None}}
    plain = run_module.hand_over

    def hand_over(*args: t.Any, **kw: t.Any) -> dict[str, t.Any]:
        handed = plain(*args, **kw)
        for entry in handed["nodes"]:
            entry["loan"] = loans.get(entry["node"])
        return handed

    monkeypatch.setattr(run_module, "hand_over", hand_over)
    existing = {
        "metadata": {"resourceVersion": "3", "labels": {"hpcops.io/loans-month": "2026-11"}}
    }
    monkeypatch.setattr(
        run_module,
        "get_object",
        lambda _c, _v, _k, name, _ns: existing if name.endswith("-11") else None,
    )
    monkeypatch.setattr(
        run_module,
        "patch_object",
        lambda _c, _v, kind, name, patch, namespace: recorder.calls.append(
            ("loans", name, namespace, *sorted(patch["data"]))
        ),
    )
    result = a_run("rebalance").execute()
    assert result["recorded"] and result["error"] == ""
    assert ("loans", "status-loans-11", "slurm", "int02.1793491260") in recorder.calls
    assert recorder.names()[-3:] == ["record", "loans", "event"]
