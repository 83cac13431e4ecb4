# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover policy option, shared by handover_plan and node_handover.

PRIVATE to the collection. Documented in the doc fragment hpcops.slinky.handover; keep the
two in step.
"""

from __future__ import annotations

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._handover_plan import (
    PartitionPolicy,
    Policy,
    PolicyError,
)

POLICY_SPEC: dict[str, dict[str, t.Any]] = {
    "pool_selector": {"type": "dict", "required": True},
    "never_touch_selector": {"type": "dict", "default": {}},
    "headroom": {"type": "int", "default": 1},
    "max_lent": {"type": "int"},
    "max_lent_fraction": {"type": "float", "default": 1.0},
    "lend_min_idle_s": {"type": "int", "default": 600},
    "relend_cooldown_s": {"type": "int", "default": 1800},
    "max_changes_per_run": {"type": "int", "default": 8},
    "demand_namespaces": {"type": "list", "elements": "str", "default": []},
    "demand_selector": {"type": "dict", "default": {}},
    "system_namespaces": {
        "type": "list",
        "elements": "str",
        "default": ["kube-system", "kube-node-lease", "kube-public"],
    },
    "partitions": {"type": "dict", "default": {}},
    "default_escalation": {
        "type": "str",
        "choices": ["requeue", "cancel", "wait"],
        "default": "requeue",
    },
    "default_grace_s": {"type": "int", "default": 300},
}


def policy_from_params(params: dict[str, t.Any]) -> Policy:
    """The planner's policy; PolicyError naming the option at fault."""
    partitions: dict[str, PartitionPolicy] = {}
    for name, raw in (params["partitions"] or {}).items():
        if not isinstance(raw, dict) or set(raw) - {"grace_s", "escalation"}:
            raise PolicyError(
                f"policy.partitions.{name}",
                f"{raw!r} is not a mapping of grace_s and escalation",
                "for example {grace_s: 300, escalation: requeue}",
            )
        try:
            grace = int(raw.get("grace_s", params["default_grace_s"]))
        except (TypeError, ValueError):
            raise PolicyError(
                f"policy.partitions.{name}.grace_s", "is not a number", "give seconds"
            ) from None
        partitions[str(name)] = PartitionPolicy(
            grace, str(raw.get("escalation", params["default_escalation"]))
        )
    return Policy(
        pool_selector={str(k): str(v) for k, v in params["pool_selector"].items()},
        never_touch_selector={str(k): str(v) for k, v in params["never_touch_selector"].items()},
        headroom=params["headroom"],
        max_lent=params["max_lent"],
        max_lent_fraction=params["max_lent_fraction"],
        lend_min_idle_s=params["lend_min_idle_s"],
        relend_cooldown_s=params["relend_cooldown_s"],
        max_changes_per_run=params["max_changes_per_run"],
        demand_namespaces=tuple(params["demand_namespaces"]),
        demand_selector={str(k): str(v) for k, v in params["demand_selector"].items()},
        system_namespaces=tuple(params["system_namespaces"]),
        partitions=partitions,
        default_partition=PartitionPolicy(params["default_grace_s"], params["default_escalation"]),
    )


def handover_argument_spec() -> dict[str, dict[str, t.Any]]:
    """A fresh copy of the options of the doc fragment, to merge into a module's spec."""
    return {
        "journal_annotation": {"type": "str", "default": "hpcops.io/handover"},
        "policy": {"type": "dict", "required": True, "options": dict(POLICY_SPEC)},
    }
