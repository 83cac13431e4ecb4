# SPDX-License-Identifier: GPL-3.0-or-later
"""The Lease decisions: who may take it, renew it, take it over or give it back."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import (
    decide,
    lease_body,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import (
    microtime,
    parse_time,
)

NOW = 1_800_000_000.0


def lease(holder: str, renewed: float, duration: int = 60) -> dict[str, t.Any]:
    return {
        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "42"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": microtime(renewed - 5),
            "renewTime": microtime(renewed),
            "leaseTransitions": 3,
        },
    }


@pytest.mark.parametrize(
    ("current", "me", "want", "action", "holder"),
    [
        (None, "run-a", "acquired", "create", "run-a"),
        (lease("run-a", NOW - 10), "run-a", "acquired", "renew", "run-a"),
        (lease("run-b", NOW - 10), "run-a", "acquired", "keep", "run-b"),
        (lease("run-b", NOW - 61), "run-a", "acquired", "take_over", "run-a"),
        (lease("", NOW - 10), "run-a", "acquired", "take_over", "run-a"),
        (lease("run-a", NOW - 10), "run-a", "released", "release", ""),
        (lease("run-b", NOW - 10), "run-a", "released", "none", "run-b"),
        (None, "run-a", "released", "none", ""),
    ],
)
def test_decide(
    current: dict[str, t.Any] | None, me: str, want: str, action: str, holder: str
) -> None:
    decision = decide(current, me, NOW, want)
    assert (decision.action, decision.holder) == (action, holder)


def test_a_live_holder_reports_how_long_it_has_left() -> None:
    assert decide(lease("run-b", NOW - 10), "run-a", NOW).expires_in == pytest.approx(50)


def test_bodies_carry_the_version_read_and_count_transitions() -> None:
    taken = lease_body("l", "ns", "run-a", 60, NOW, lease("run-b", NOW - 100))
    assert taken["metadata"]["resourceVersion"] == "42"
    assert taken["spec"]["leaseTransitions"] == 4
    renewed = lease_body("l", "ns", "run-b", 60, NOW, lease("run-b", NOW - 10))
    assert renewed["spec"]["leaseTransitions"] == 3
    assert parse_time(renewed["spec"]["renewTime"]) == pytest.approx(NOW)
    assert parse_time(renewed["spec"]["acquireTime"]) == pytest.approx(NOW - 15)
    assert "resourceVersion" not in lease_body("l", "ns", "run-a", 60, NOW)["metadata"]
