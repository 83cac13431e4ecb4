# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a Slurm cluster has settled after a change of its charts (pure; no I/O).

PRIVATE: for this collection's plugins only; names and signatures may change without notice.

A Helm upgrade returns once the objects are written; the Slinky operator then rolls the
NodeSets, possibly twice (a new operator replaces the pods it would build differently, then
the new chart changes the template again). A cluster has settled when every NodeSet's
status is of its current generation with every pod of the newest revision and ready, and
when every Slurm node an upgrade drained takes jobs again. Each function returns what is
not there yet, in words, so a wait that times out says what it saw.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterable, Mapping

# A drain with one of these reasons is the upgrade's (ours, or ours renamed by the replaced
# pod's preStop) or the operator's own, which it lifts itself once its rollout is done.
PASSING_DRAIN_PREFIXES = ("hpcops:", "slurm-operator:")
NOT_UP = frozenset({"DOWN", "FUTURE", "UNKNOWN", "NOT_RESPONDING", "POWERED_DOWN", "INVALID_REG"})


def _count(status: Mapping[str, t.Any], key: str) -> int:
    return int(status.get(key) or 0)


def nodesets_rolling(nodesets: Iterable[Mapping[str, t.Any]]) -> list[tuple[str, str]]:
    """(name, what it lacks) of each NodeSet whose rollout is not complete (k8s_info
    resources in), in their order."""
    rolling = []
    for nodeset in nodesets:
        meta = nodeset.get("metadata") or {}
        status = nodeset.get("status") or {}
        name = str(meta.get("name", "?"))
        generation = int(meta.get("generation") or 0)
        observed = _count(status, "observedGeneration")
        if observed < generation:
            rolling.append(
                (
                    name,
                    f"generation {generation} not yet seen by the operator "
                    f"(it last saw {observed or 'none'})",
                )
            )
            continue
        replicas = _count(status, "replicas")
        # Slinky 1.1 and 1.2 write `desired` (StatefulSet: spec.replicas, DaemonSet: the
        # Nodes its selector matches), left out when it is 0.
        desired = _count(status, "desired")
        updated = _count(status, "updatedReplicas")
        ready = _count(status, "readyReplicas")
        if (replicas, updated, ready) != (desired, desired, desired):
            rolling.append(
                (
                    name,
                    f"{replicas} of {desired} pods, {updated} of the newest revision, "
                    f"{ready} ready",
                )
            )
    return rolling


def nodeset_rollout_pending(nodesets: Iterable[Mapping[str, t.Any]]) -> list[str]:
    """One line per NodeSet whose rollout is not complete (k8s_info resources in)."""
    return [f"NodeSet {name}: {lacks}" for name, lacks in nodesets_rolling(nodesets)]


def _node_state(node: Mapping[str, t.Any]) -> str:
    return "+".join([str(node.get("state") or "?"), *(node.get("state_flags") or [])])


def slurm_nodes_not_back(nodes: Iterable[Mapping[str, t.Any]], names: Iterable[str]) -> list[str]:
    """One line per named Slurm node (slurm_info's nodes in) that does not take jobs yet:
    missing, not up, or drained for the upgrade or by the operator. A drain anybody else set
    counts as back: it is theirs to lift, and is named elsewhere."""
    by_name = {node.get("name"): node for node in nodes}
    waiting = []
    for name in names:
        node = by_name.get(name)
        if node is None:
            waiting.append(f"{name}: not registered in Slurm")
            continue
        flags = set(node.get("state_flags") or [])
        reason = str(node.get("reason") or "")
        if ({str(node.get("state"))} | flags) & NOT_UP:
            waiting.append(f"{name}: {_node_state(node)}")
        elif "DRAIN" in flags and reason.startswith(PASSING_DRAIN_PREFIXES):
            waiting.append(f"{name}: {_node_state(node)} ({reason})")
    return waiting


def _image_of(container: Mapping[str, t.Any]) -> str:
    return str(container.get("image") or "")


def statefulset_rollout_pending(
    statefulsets: Iterable[Mapping[str, t.Any]], images: Mapping[str, str]
) -> list[str]:
    """One line per Slurm program of `images` (program -> the image it must run) whose
    StatefulSet (slurmctld's, slurmdbd's) does not run that image on every pod, ready, yet:
    the operator writes the new template after Helm returned, so an old StatefulSet that
    looks settled is not taken for the new one (k8s_info resources in)."""
    pending = []
    for program, image in sorted(images.items()):
        found = False
        for statefulset in statefulsets:
            spec = statefulset.get("spec") or {}
            containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
            named = [c for c in containers if c.get("name") == program]
            if not named:
                continue
            found = True
            meta = statefulset.get("metadata") or {}
            status = statefulset.get("status") or {}
            name = meta.get("name", "?")
            if _image_of(named[0]) != image:
                pending.append(f"{program} ({name}): runs {_image_of(named[0])}, not yet {image}")
                continue
            generation = int(meta.get("generation") or 0)
            if _count(status, "observedGeneration") < generation:
                pending.append(f"{program} ({name}): generation {generation} not yet seen")
                continue
            replicas = int(spec.get("replicas", 1) or 0)
            updated = _count(status, "updatedReplicas")
            ready = _count(status, "readyReplicas")
            if status.get("currentRevision") != status.get("updateRevision") or (
                updated,
                ready,
            ) != (replicas, replicas):
                pending.append(
                    f"{program} ({name}): {updated} of {replicas} pods of the newest revision, "
                    f"{ready} ready"
                )
        if not found:
            pending.append(f"{program}: no StatefulSet runs it")
    return pending
