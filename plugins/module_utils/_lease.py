# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Kubernetes Lease as a run lock: who holds it, and what a run may do about it.

`decide` is pure (the Lease object, who asks, the time); the module does the one write it
names with the resourceVersion it read, so of two runs that race only one write succeeds.
"""

from __future__ import annotations

import datetime
import typing as t
from collections.abc import Mapping
from dataclasses import dataclass

MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def microtime(when: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    # timezone.utc, not datetime.UTC: modules may run on a Python older than 3.11.
    return datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc).strftime(MICROTIME)  # noqa: UP017


def parse_time(value: t.Any) -> float | None:
    if not value:
        return None
    text = str(value).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Decision:
    action: str  # create, renew, take_over, release, keep, none
    holder: str  # who holds it after the action (or now, for keep and none)
    expires_in: float | None = None  # seconds the current holder still has


def decide(
    lease: Mapping[str, t.Any] | None, holder: str, now: float, want: str = "acquired"
) -> Decision:
    """What a run that wants the Lease `acquired` (or `released`) must do."""
    spec = (lease or {}).get("spec") or {}
    current = str(spec.get("holderIdentity") or "")
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 0
    live = bool(current) and renewed is not None and renewed + float(duration) > now
    left = renewed + float(duration) - now if live and renewed is not None else None
    if want == "released":
        if lease is not None and current == holder:
            return Decision("release", "")
        return Decision("none", current, left)
    if lease is None:
        return Decision("create", holder)
    if current == holder:
        return Decision("renew", holder)
    if live:
        return Decision("keep", current, left)
    return Decision("take_over", holder)


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
