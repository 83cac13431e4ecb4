# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes calls of the handover protocol, on kubernetes.core's client.

PRIVATE to the collection: names here can change without notice. Nodes are read and patched,
the pods on a node listed, watched and deleted, Events written and the lendable NodeSets
nudged; the objects stay dicts here (the API boundary), the decisions are made on their
views.
"""

from __future__ import annotations

import time
import typing as t
from collections.abc import Callable, Mapping

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    delete_object,
    get_object,
    list_objects,
    list_with_version,
    patch_object,
    watch_changes,
    write_object,
)

JSON = dict[str, t.Any]
# Between two looks when a watch could not be had (or ended without a change).
WATCHLESS_PAUSE_S = 0.5

NODESET_API = "slinky.slurm.net/v1beta1"


class KubernetesCalls:
    """The few Kubernetes calls the protocol makes, on kubernetes.core's client."""

    def __init__(self, client: t.Any, connections: int = 8) -> None:
        self.client = client
        # Resolve the kinds once: discovery is not safe to run from several threads.
        for kind in ("Node", "Pod", "Event"):
            client.resource(kind, "v1")
        # One connection per worker: the client keeps 10 by default (5 per CPU), and a
        # connection it cannot keep is closed, so each further call would pay a new TLS
        # handshake.
        pool_manager = getattr(getattr(client.client, "client", None), "rest_client", None)
        pool_manager = getattr(pool_manager, "pool_manager", None)
        if pool_manager is not None and connections > pool_manager.connection_pool_kw.get(
            "maxsize", 1
        ):
            pool_manager.connection_pool_kw["maxsize"] = connections
            pool_manager.clear()

    def node(self, name: str) -> JSON | None:
        return get_object(self.client, "v1", "Node", name)

    def nodes(self) -> list[JSON]:
        return list_objects(self.client, "v1", "Node")

    def patch_node(self, name: str, patch: JSON) -> JSON:
        return patch_object(self.client, "v1", "Node", name, patch)

    def pods_on(self, name: str) -> list[JSON]:
        return list_objects(self.client, "v1", "Pod", field_selector=f"spec.nodeName={name}")

    def await_pods_on(
        self, name: str, done: Callable[[list[JSON]], bool], timeout_s: float
    ) -> bool:
        """Whether done(the pods on the node) turned true within timeout_s. Looked at
        whenever those pods change (a watch, each change applied to what was listed), so a
        pod that goes is seen as it goes, not at the next poll or the next list."""
        deadline = time.monotonic() + timeout_s
        selector = f"spec.nodeName={name}"
        while True:
            pods, version = list_with_version(self.client, "v1", "Pod", field_selector=selector)
            if done(pods):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            current = {pod["metadata"]["uid"]: pod for pod in pods}
            changed = False
            for change, pod in watch_changes(
                self.client, "v1", "Pod", version, remaining, field_selector=selector
            ):
                changed = True
                uid = pod.get("metadata", {}).get("uid", "")
                if change == "DELETED":
                    current.pop(uid, None)
                else:
                    current[uid] = pod
                if done(list(current.values())):
                    return True
                if time.monotonic() >= deadline:
                    return False
            if not changed:
                # No change, or no watch to be had: a short pause before the next look.
                time.sleep(min(WATCHLESS_PAUSE_S, max(deadline - time.monotonic(), 0.0)))

    def delete_pod(self, pod: Mapping[str, t.Any], grace_period_s: int | None = None) -> None:
        """Delete the pod as read; with a grace period, that pod in whatever version (a
        terminating pod changes as it goes, and its grace is what is being shortened)."""
        meta = pod["metadata"]
        delete_object(
            self.client,
            "v1",
            "Pod",
            meta["name"],
            meta["namespace"],
            meta["resourceVersion"],
            grace_period_s,
            uid=meta.get("uid", "") if grace_period_s is not None else "",
        )

    def event(self, body: JSON) -> None:
        write_object(self.client, body, create=True)

    def nudge_nodesets(
        self, label: str, value: str, annotation: str, op: str, namespace: str | None = None
    ) -> list[str]:
        """Touch the NodeSets that select the lend label, so the operator reconciles now.

        Slinky 1.1's Node watch only wakes NodeSets that already have a pod on the Node; a
        newly labelled node would wait for the NodeSet's next periodic reconcile (about 25 s
        in the lab).  An annotation change on the NodeSet wakes its reconcile at once.
        """
        touched = []
        for nodeset in lendable_nodesets(self.client, label, value, namespace):
            meta = nodeset["metadata"]
            patch_object(
                self.client,
                NODESET_API,
                "NodeSet",
                meta["name"],
                {"metadata": {"annotations": {annotation: op}}},
                meta["namespace"],
            )
            touched.append(f"{meta['namespace']}/{meta['name']}")
        return touched


def lendable_nodesets(
    client: t.Any, label: str, value: str, namespace: str | None = None
) -> list[JSON]:
    """The Slinky NodeSets whose pods select the lend label: those that run slurmd on lent
    nodes."""
    return [
        nodeset
        for nodeset in list_objects(client, NODESET_API, "NodeSet", namespace)
        if (nodeset_pod_spec(nodeset).get("nodeSelector") or {}).get(label) == value
    ]


def lendable_nodesets_of(
    client: t.Any, lend_label: Mapping[str, t.Any], namespace: str | None = None
) -> list[JSON]:
    """The NodeSets that select the lend label (given as its one key and value)."""
    ((label, value),) = lend_label.items()
    return lendable_nodesets(client, str(label), str(value), namespace)


def nodeset_pod_spec(nodeset: Mapping[str, t.Any]) -> JSON:
    spec: JSON = ((nodeset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return spec


def nodeset_feature(nodeset: Mapping[str, t.Any]) -> str:
    """The Slurm feature Slinky gives a NodeSet's slurmd nodes: the pods' hostname prefix
    without its dash, else the NodeSet's name (as the operator's slurmd arguments do)."""
    hostname = str(nodeset_pod_spec(nodeset).get("hostname") or "").strip("-")
    return hostname or str((nodeset.get("metadata") or {}).get("name", ""))
