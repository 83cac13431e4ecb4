# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Roll out workloads whose pods read a Secret only at their start (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

slurm-bridge 1.2.1 reads its slurmrestd token from an environment variable, and the
directory sidecars read their configuration once: a renewed token or a changed bind password
reaches them only in new pods.  The workload's pod template carries a digest of the Secret's
data in an annotation; when the digest no longer matches, the template is patched with the
new one, which makes its controller replace the pods as in any rollout.
"""

from __future__ import annotations

import hashlib
import json
import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ANNOTATION_PREFIX = "hpcops.io/secret-"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def secret_digest(data: Mapping[str, t.Any] | None) -> str:
    """A short digest of a Secret's data (its base64 values, keys sorted); never the data."""
    text = json.dumps(dict(data or {}), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def annotation_key(secret_name: str) -> str:
    return f"{ANNOTATION_PREFIX}{secret_name}"[:63]


@dataclass(frozen=True)
class Rollout:
    kind: str
    name: str
    was: str  # the digest the pods started with ("" when none is recorded)
    patch: dict[str, t.Any]


def plan_rollouts(
    secret_name: str, digest: str, workloads: Sequence[Mapping[str, t.Any]]
) -> list[Rollout]:
    """The workloads whose pod template does not carry `digest` yet, each with its patch."""
    key = annotation_key(secret_name)
    plans = []
    for obj in workloads:
        template = (obj.get("spec") or {}).get("template") or {}
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        was = str(annotations.get(key, ""))
        if was == digest:
            continue
        patch = {"spec": {"template": {"metadata": {"annotations": {key: digest}}}}}
        plans.append(Rollout(str(obj.get("kind", "")), obj["metadata"]["name"], was, patch))
    return plans
