# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Kubernetes Lease as a run lock: who holds it, and what a run may do about it.

PRIVATE to the collection: names here can change without notice.

`decide` is pure (the Lease object, who asks, the time); the module does the one write it
names with the resourceVersion it read, so of two runs that race only one write succeeds.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import (
    microtime,
    parse_time,
)


class LeaseAction:
    """What a run does about the Lease (the lease module's decision)."""

    CREATE: t.Final = "create"
    RENEW: t.Final = "renew"
    TAKE_OVER: t.Final = "take_over"  # the holder's time ran out
    RELEASE: t.Final = "release"
    KEEP: t.Final = "keep"  # another run holds it: leave it
    NONE: t.Final = "none"  # nothing to release


@dataclass(frozen=True)
class LeaseDecision:
    action: str  # one of LeaseAction
    holder: str  # who holds it after the action (or now, for keep and none)
    expires_in: float | None = None  # seconds the current holder still has


def decide(
    lease: Mapping[str, t.Any] | None, holder: str, now: float, want: str = "acquired"
) -> LeaseDecision:
    """What a run that wants the Lease `acquired` (or `released`) must do."""
    spec = (lease or {}).get("spec") or {}
    current = str(spec.get("holderIdentity") or "")
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 0
    live = bool(current) and renewed is not None and renewed + float(duration) > now
    left = renewed + float(duration) - now if live and renewed is not None else None
    if want == "released":
        if lease is not None and current == holder:
            return LeaseDecision(LeaseAction.RELEASE, "")
        return LeaseDecision(LeaseAction.NONE, current, left)
    if lease is None:
        return LeaseDecision(LeaseAction.CREATE, holder)
    if current == holder:
        return LeaseDecision(LeaseAction.RENEW, holder)
    if live:
        return LeaseDecision(LeaseAction.KEEP, current, left)
    return LeaseDecision(LeaseAction.TAKE_OVER, holder)


def lease_body(
    name: str,
    namespace: str,
    holder: str,
    duration_s: int,
    now: float,
    previous: Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    """The Lease to write for `holder`, keeping resourceVersion and transitions of `previous`."""
    meta: dict[str, t.Any] = {"name": name, "namespace": namespace}
    spec: dict[str, t.Any] = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_s,
        "acquireTime": microtime(now),
        "renewTime": microtime(now),
        "leaseTransitions": 0,
    }
    if previous is not None:
        old_meta = previous.get("metadata") or {}
        old_spec = previous.get("spec") or {}
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        meta["labels"] = old_meta.get("labels") or {}
        transitions = int(old_spec.get("leaseTransitions") or 0)
        if old_spec.get("holderIdentity") == holder:
            spec["acquireTime"] = old_spec.get("acquireTime") or spec["acquireTime"]
            spec["leaseTransitions"] = transitions
        else:
            spec["leaseTransitions"] = transitions + 1
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
