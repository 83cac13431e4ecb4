# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_node's planning: what to send for each node, and what never to touch."""

from __future__ import annotations

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.node_change import (
    NodeRequest,
    plan_node_change,
)


def node(
    state: str = "IDLE", flags: tuple[str, ...] = (), reason: str = "", **extra: object
) -> dict:
    return {
        "name": "cpu01",
        "state": state,
        "state_flags": list(flags),
        "reason": reason,
        "reason_set_by_user": "admin" if reason else "",
        "features": [],
        "weight": 1,
        "comment": "",
        **extra,
    }


def test_drain_an_idle_node_with_our_prefix() -> None:
    change = plan_node_change("cpu01", node(), NodeRequest(state="drain", reason="reclaim 4f2a"))
    assert change.action == "update"
    assert change.body == {"state": ["DRAIN"], "reason": "hpcops: reclaim 4f2a"}
    assert change.before["state"] == "IDLE" and change.after["state"] == "IDLE+DRAIN"


def test_drain_is_idempotent() -> None:
    drained = node(flags=("DRAIN",), reason="hpcops: reclaim 4f2a")
    change = plan_node_change(
        "cpu01", drained, NodeRequest(state="drain", reason="hpcops: reclaim 4f2a")
    )
    assert change.action == "none" and not change.changed


def test_our_drain_gets_the_new_reason() -> None:
    drained = node(flags=("DRAIN",), reason="hpcops: reclaim old")
    change = plan_node_change("cpu01", drained, NodeRequest(state="drain", reason="reclaim new"))
    assert change.body == {"state": ["DRAIN"], "reason": "hpcops: reclaim new"}


@pytest.mark.parametrize("reason", ["bad DIMM", "slurm-operator: node cordoned"])
def test_a_foreign_drain_is_kept_and_reported(reason: str) -> None:
    drained = node(flags=("DRAIN",), reason=reason)
    change = plan_node_change("cpu01", drained, NodeRequest(state="drain", reason="reclaim"))
    assert change.action == "none"
    assert change.foreign_reason == reason


@pytest.mark.parametrize("state", ["resume", "undrain"])
def test_a_foreign_drain_is_never_cleared_without_force(state: str) -> None:
    drained = node(flags=("DRAIN",), reason="bad DIMM")
    change = plan_node_change("cpu01", drained, NodeRequest(state=state))
    assert change.action == "refuse"
    assert "'bad DIMM' set by admin" in change.message
    assert "force: true" in change.message
    forced = plan_node_change("cpu01", drained, NodeRequest(state=state, force=True))
    assert forced.body == {"state": [state.upper()]}


def test_resume_clears_our_drain_and_our_down() -> None:
    ours = NodeRequest(state="resume")
    drained = plan_node_change("cpu01", node(flags=("DRAIN",), reason="hpcops: x"), ours)
    assert drained.body == {"state": ["RESUME"]}
    assert drained.after["state"] == "IDLE" and drained.after["reason"] == ""
    down = plan_node_change("cpu01", node(state="DOWN", reason="hpcops: requeue"), ours)
    assert down.body == {"state": ["RESUME"]}


def test_resume_of_a_healthy_node_changes_nothing() -> None:
    assert (
        plan_node_change("cpu01", node(state="MIXED"), NodeRequest(state="resume")).action == "none"
    )


def test_undrain_leaves_a_down_node_alone() -> None:
    down = node(state="DOWN", reason="hpcops: requeue")
    assert plan_node_change("cpu01", down, NodeRequest(state="undrain")).action == "none"


def test_down_a_busy_node() -> None:
    change = plan_node_change(
        "cpu01", node(state="ALLOCATED"), NodeRequest(state="down", reason="requeue")
    )
    assert change.body == {"state": ["DOWN"], "reason": "hpcops: requeue"}
    assert change.after["state"] == "DOWN"


def test_down_keeps_a_foreign_down() -> None:
    down = node(state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding")
    change = plan_node_change("cpu01", down, NodeRequest(state="down", reason="requeue"))
    assert change.action == "none" and change.foreign_reason == "Not responding"


def test_absent_deletes_an_idle_node_and_refuses_a_busy_one() -> None:
    assert (
        plan_node_change("cpu01", node(flags=("DRAIN",)), NodeRequest(state="absent")).action
        == "delete"
    )
    busy = plan_node_change(
        "cpu01", node(state="MIXED", flags=("DRAIN",)), NodeRequest(state="absent")
    )
    assert busy.action == "refuse" and "still runs jobs" in busy.message
    assert (
        plan_node_change(
            "cpu01", node(state="MIXED"), NodeRequest(state="absent", force=True)
        ).action
        == "delete"
    )


def test_absent_of_an_unknown_node_changes_nothing() -> None:
    change = plan_node_change("cpu09", None, NodeRequest(state="absent"))
    assert change.action == "none" and change.before == change.after == {"present": False}


def test_any_other_state_of_an_unknown_node_is_refused() -> None:
    change = plan_node_change("cpu09", None, NodeRequest(state="drain", reason="x"))
    assert (
        change.action == "refuse" and "cpu09 is not a node of this Slurm cluster" in change.message
    )


def test_features_weight_and_comment_only_when_they_differ() -> None:
    current = node(features=["ib", "avx512"], weight=10, comment="rack 4")
    same = NodeRequest(features=("avx512", "ib"), weight=10, comment="rack 4")
    assert plan_node_change("cpu01", current, same).action == "none"
    other = NodeRequest(features=("ib",), weight=5, comment="rack 4")
    change = plan_node_change("cpu01", current, other)
    assert change.body == {"features": "ib", "features_act": "ib", "weight": 5}
    assert change.after["features"] == ["ib"] and change.after["weight"] == 5


def test_clearing_features_sends_empty_strings() -> None:
    change = plan_node_change("cpu01", node(features=["ib"]), NodeRequest(features=()))
    assert change.body == {"features": "", "features_act": ""}
    assert change.after["features"] == []
