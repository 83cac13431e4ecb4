# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the claims a deployment asks for can bind, before anything is changed (pure).

PRIVATE to the collection: names here can change without notice.

On bare metal there is often no storage class at all, or none marked default: slurmctld's
claim then stays Pending and so does slurmctld (slurm-operator #52). And the operator makes
the claim once: a Controller's persistence set differently later is never applied
(`docs/usage/controller-operations.md`), so a change is refused here with the reason
instead of being accepted and ignored.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping, Sequence

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
# The slurm chart's controller.persistence (1.1 and 1.2 alike).
CHART_PERSISTENCE: dict[str, t.Any] = {
    "enabled": True,
    "existingClaim": "",
    "storageClassName": None,
    "accessModes": ["ReadWriteOnce"],
    "resources": {"requests": {"storage": "4Gi"}},
}
VARIABLE = "slurm_cluster_values.controller.persistence"
# What the claim is made from, and where each is set; the rest of the spec (selector,
# volumeMode) is rarely set.
FIXED_AT_CREATION = {
    "enabled": "enabled",
    "existingClaim": "existingClaim",
    "storageClassName": "storageClassName",
    "accessModes": "accessModes",
    "storage": "resources.requests.storage",
}


def default_classes(storage_classes: Sequence[Mapping[str, t.Any]]) -> list[str]:
    return sorted(
        str(item["metadata"]["name"])
        for item in storage_classes
        if any(
            str((item["metadata"].get("annotations") or {}).get(key, "")).lower() == "true"
            for key in DEFAULT_CLASS_ANNOTATIONS
        )
    )


def storage_class_problems(
    variable: str,
    class_name: str | None,
    storage_classes: Sequence[Mapping[str, t.Any]],
    claim: str,
    consumer: str,
    other_fixes: str = "",
) -> list[str]:
    """Why a claim of class_name would not bind (None: the default class; "": a volume of
    no class, bound by hand)."""
    names = sorted(str(item["metadata"]["name"]) for item in storage_classes)
    fixes = f", {other_fixes}" if other_fixes else ""
    if class_name is None and not default_classes(storage_classes):
        return [
            f"{variable}: unset, so {claim} asks for the default StorageClass, and this "
            f"cluster has none marked default (it has {', '.join(names) or 'no StorageClass at all'}), "
            f"so {consumer} would stay Pending; name a StorageClass there, mark one default "
            f'(storageclass.kubernetes.io/is-default-class: "true"){fixes}'
        ]
    if class_name and class_name not in names:
        return [
            f"{variable}: there is no StorageClass {class_name} (the cluster has "
            f"{', '.join(names) or 'none'}); name one of them, or create it first"
        ]
    return []


def controller_persistence(values: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The controller's persistence the chart renders: its defaults under the site's."""
    given = (values.get("controller") or {}).get("persistence") or {}
    merged = {**CHART_PERSISTENCE, **given}
    requests = ((merged.get("resources") or {}).get("requests")) or {}
    class_name = merged.get("storageClassName")
    return {
        "enabled": merged.get("enabled") is not False,
        "existingClaim": str(merged.get("existingClaim") or ""),
        # "-" and "" both mean no dynamic provisioning; the chart renders "".
        "storageClassName": "" if class_name in ("", "-") else class_name,
        "accessModes": sorted(merged.get("accessModes") or []),
        "storage": str(requests.get("storage", "")),
    }


def _existing(spec: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The same fields from a Controller's spec.persistence."""
    requests = ((spec.get("resources") or {}).get("requests")) or {}
    return {
        "enabled": spec.get("enabled") is not False,
        "existingClaim": str(spec.get("existingClaim") or ""),
        "storageClassName": spec.get("storageClassName"),
        "accessModes": sorted(spec.get("accessModes") or []),
        "storage": str(requests.get("storage", "")),
    }


def controller_storage_problems(
    values: Mapping[str, t.Any],
    storage_classes: Sequence[Mapping[str, t.Any]],
    controller: Mapping[str, t.Any] | None = None,
) -> list[str]:
    """Why slurmctld's claim would not bind, or cannot change; empty when it can go ahead.

    `controller` is the Controller already in the cluster (None on a first deployment)."""
    if (values.get("controller") or {}).get("external"):
        return []  # slurmctld runs elsewhere: no claim here
    wanted = controller_persistence(values)
    problems: list[str] = []
    if wanted["enabled"] and not wanted["existingClaim"]:
        problems += storage_class_problems(
            f"{VARIABLE}.storageClassName",
            wanted["storageClassName"],
            storage_classes,
            "slurmctld's claim",
            "slurmctld",
            "give an existingClaim, or set enabled: false (slurmctld then loses its jobs and "
            "nodes whenever its pod is recreated)",
        )
    if controller is not None:
        before = _existing((controller.get("spec") or {}).get("persistence") or {})
        name = (controller.get("metadata") or {}).get("name", "")
        changed = [field for field in FIXED_AT_CREATION if before[field] != wanted[field]]
        problems += [
            f"{VARIABLE}.{FIXED_AT_CREATION[field]}: the Controller {name} exists with {field} "
            f"{_shown(before[field])}, and the operator makes slurmctld's claim only once, so "
            f"{_shown(wanted[field])} would never apply; keep {_shown(before[field])}, or "
            "drain the cluster, save its state, delete the Controller and its claim and "
            "deploy again"
            for field in changed
        ]
    return problems


def _shown(value: t.Any) -> str:
    if value is None:
        return "unset (the default StorageClass)"
    if value == "":
        return '""'
    return str(value)
