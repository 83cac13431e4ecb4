# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes side of the handover modules, through kubernetes.core's own client.

kubernetes.core builds the client (kubeconfig, context, in-cluster service account, the
K8S_AUTH_* environment) exactly as its modules do; this file only turns its errors into
one exception the modules report cleanly, and its objects into plain dicts.
"""

from __future__ import annotations

import typing as t

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import (
        get_api_client,
    )
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import (
        CoreException,
    )

    HAS_KUBERNETES_CORE = True
except ImportError:  # the collection, or the kubernetes Python library, is missing
    HAS_KUBERNETES_CORE = False

try:
    from kubernetes.dynamic.exceptions import DynamicApiError
except ImportError:
    DynamicApiError = Exception  # only caught below


class KubernetesError(Exception):
    """A Kubernetes call failed; the message says which and why."""


def kubernetes_client(kubeconfig: str | None = None, context: str | None = None) -> t.Any:
    """kubernetes.core's dynamic client for these settings (or its defaults)."""
    if not HAS_KUBERNETES_CORE:
        raise KubernetesError(
            "the kubernetes.core collection and the kubernetes Python library are needed: "
            "ansible-galaxy collection install kubernetes.core; pip install kubernetes"
        )
    auth = {
        key: value for key, value in (("kubeconfig", kubeconfig), ("context", context)) if value
    }
    try:
        return get_api_client(**auth)
    except CoreException as err:
        raise KubernetesError(f"cannot reach the cluster: {err}") from None


def list_objects(
    client: t.Any, api_version: str, kind: str, namespace: str | None = None, **selectors: str
) -> list[dict[str, t.Any]]:
    """Every object of a kind (in a namespace), as dicts."""
    try:
        resource = client.resource(kind, api_version)
        listed = client.get(resource, namespace=namespace, **selectors)
    except (CoreException, DynamicApiError) as err:
        raise KubernetesError(f"cannot list {kind} ({api_version}): {_reason(err)}") from None
    items: list[dict[str, t.Any]] = listed.to_dict().get("items", [])
    return items


def _reason(err: Exception) -> str:
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None) or str(err)
    return f"HTTP {status}: {reason}" if status else str(reason)
