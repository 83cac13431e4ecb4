# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What slurm_node must send to bring one node to the wanted state (pure, no I/O).

PRIVATE to the collection.

Ownership of drains: a drain or DOWN whose reason starts with our prefix is ours. We
never clear one that is not ours unless forced, and we never overwrite somebody else's
reason with ours: their drain stays, is reported, and the node is left as it is. That is
the rule the Slinky operator follows for its `slurm-operator:` drains too.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field

JSON = dict[str, t.Any]

NODE_STATE_CHOICES = ("drain", "resume", "undrain", "down", "absent")


@dataclass(frozen=True)
class NodeRequest:
    """What the task asks for; None means 'leave as it is'."""

    state: str | None = None
    reason: str | None = None
    reason_prefix: str = "hpcops:"
    force: bool = False
    features: tuple[str, ...] | None = None
    weight: int | None = None
    comment: str | None = None

    @property
    def full_reason(self) -> str | None:
        """The reason as Slurm will show it: always carrying our prefix."""
        if self.reason is None:
            return None
        if self.reason.startswith(self.reason_prefix):
            return self.reason
        return f"{self.reason_prefix} {self.reason}"


@dataclass
class NodeChange:
    """The outcome of planning one node."""

    name: str
    action: str = "none"  # none | update | delete | refuse
    body: JSON = field(default_factory=dict)
    message: str = ""
    foreign_reason: str | None = None
    before: JSON = field(default_factory=dict)
    after: JSON = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action in ("update", "delete")


def is_ours(node: JSON, prefix: str) -> bool:
    return bool(node["reason"]) and node["reason"].startswith(prefix)


def node_view(node: JSON | None) -> JSON:
    """The part of a node that slurm_node manages, for diffs."""
    if node is None:
        return {"present": False}
    return {
        "present": True,
        "state": "+".join([node["state"], *node["state_flags"]]),
        "reason": node["reason"],
        "features": sorted(node["features"]),
        "weight": node["weight"],
        "comment": node["comment"],
    }


def _state_body(node: JSON, request: NodeRequest) -> tuple[JSON, str, str | None]:
    """The state part of the update: (body, refusal message, foreign reason)."""
    state = request.state
    drained = "DRAIN" in node["state_flags"]
    down = node["state"] == "DOWN"
    ours = is_ours(node, request.reason_prefix)
    foreign = node["reason"] if (drained or down) and not ours else None
    reason = request.full_reason

    if state in ("drain", "down"):
        already = drained if state == "drain" else down
        if already and not ours:
            # Somebody else's drain (or DOWN) stays as it is; it already keeps jobs off.
            return {}, "", foreign
        if already and node["reason"] == reason:
            return {}, "", None
        return {"state": [state.upper()], "reason": reason}, "", None

    if state in ("resume", "undrain"):
        holds = drained or (down and state == "resume")
        if not holds:
            return {}, "", None
        if not ours and not request.force:
            by = f" set by {node['reason_set_by_user']}" if node.get("reason_set_by_user") else ""
            return (
                {},
                f"{node['name']} is {'drained' if drained else 'down'} with reason "
                f"{node['reason']!r}{by}, which does not start with {request.reason_prefix!r}; "
                "it is not ours to clear (set force: true to clear it anyway)",
                foreign,
            )
        return {"state": [state.upper()]}, "", None
    return {}, "", None


def plan_node_change(name: str, node: JSON | None, request: NodeRequest) -> NodeChange:
    """What to do with one node; `node` is the normalised node, or None if Slurm lacks it."""
    change = NodeChange(name=name, before=node_view(node))
    if request.state == "absent":
        if node is None:
            change.after = change.before
            return change
        busy = node["state"] in ("ALLOCATED", "MIXED") or "COMPLETING" in node["state_flags"]
        if busy and not request.force:
            change.action = "refuse"
            change.message = (
                f"{name} still runs jobs ({node['state']}); drain it and wait until it is idle "
                "before removing it, or set force: true"
            )
            change.after = change.before
            return change
        change.action = "delete"
        change.after = {"present": False}
        return change

    if node is None:
        change.action = "refuse"
        change.message = f"{name} is not a node of this Slurm cluster"
        return change

    body, refusal, foreign = _state_body(node, request)
    change.foreign_reason = foreign
    if refusal:
        change.action = "refuse"
        change.message = refusal
        change.after = change.before
        return change

    if request.features is not None and sorted(request.features) != sorted(node["features"]):
        # slurmctld refuses available features that leave active ones out ("Active features
        # not subset of available features"), and only an empty string clears them: send
        # both, as CSV.
        body["features"] = body["features_act"] = ",".join(request.features)
    if request.weight is not None and request.weight != node["weight"]:
        body["weight"] = request.weight
    if request.comment is not None and request.comment != node["comment"]:
        body["comment"] = request.comment

    change.after = _predict(change.before, body)
    if body:
        change.action = "update"
        change.body = body
    return change


def _predict(before: JSON, body: JSON) -> JSON:
    """The node view after `body` is applied, as far as it can be known beforehand."""
    after = dict(before)
    base, *flags = before["state"].split("+")
    for state in body.get("state", []):
        if state == "DRAIN" and "DRAIN" not in flags:
            flags.append("DRAIN")
        elif state == "DOWN":
            base = "DOWN"
        elif state == "UNDRAIN":
            flags = [flag for flag in flags if flag != "DRAIN"]
        elif state == "RESUME":
            flags = [flag for flag in flags if flag != "DRAIN"]
            base = "IDLE" if base == "DOWN" else base
    after["state"] = "+".join([base, *flags])
    if "reason" in body:
        after["reason"] = body["reason"]
    elif body.get("state") in (["RESUME"], ["UNDRAIN"]):
        after["reason"] = ""
    if "features" in body:
        after["features"] = sorted(filter(None, body["features"].split(",")))
    for key in ("weight", "comment"):
        if key in body:
            after[key] = body[key]
    return after
