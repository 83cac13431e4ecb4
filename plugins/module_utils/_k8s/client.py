# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes side of the handover modules, through kubernetes.core's own client.

PRIVATE to the collection: names here can change without notice.

kubernetes.core builds the client (kubeconfig, context, in-cluster service account, the
K8S_AUTH_* environment) exactly as its modules do; this file only turns its errors into
one exception the modules report cleanly, and its objects into plain dicts.
"""

from __future__ import annotations

import base64
import json
import math
import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec

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
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
    from kubernetes.watch import Watch
except ImportError:
    ApiException = DynamicApiError = Exception  # only caught below
    ResourceNotFoundError = Exception
    Watch = None

# The apiserver did not answer at all (urllib3 comes with the kubernetes library).
TRANSPORT_ERRORS: tuple[type[Exception], ...]
try:
    from urllib3.exceptions import HTTPError as _TransportError

    TRANSPORT_ERRORS = (_TransportError,)
except ImportError:
    TRANSPORT_ERRORS = ()


JSON = dict[str, t.Any]


class KubernetesError(Exception):
    """A Kubernetes call failed; the message says which and why."""


def kubernetes_argspec() -> ArgumentSpec:
    """The options of the doc fragment hpcops.slinky.kubernetes."""
    return ArgumentSpec({"kubeconfig": {"type": "path"}, "context": {"type": "str"}})


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
    except (CoreException, *TRANSPORT_ERRORS) as err:
        raise KubernetesError(f"cannot reach the cluster: {err}") from None


def list_objects(
    client: t.Any, api_version: str, kind: str, namespace: str | None = None, **selectors: str
) -> list[dict[str, t.Any]]:
    """Every object of a kind (in a namespace), as dicts."""
    return list_with_version(client, api_version, kind, namespace, **selectors)[0]


def list_with_version(
    client: t.Any, api_version: str, kind: str, namespace: str | None = None, **selectors: str
) -> tuple[list[dict[str, t.Any]], str]:
    """Every object of a kind (in a namespace), as dicts, and the list's resourceVersion."""
    try:
        resource = client.resource(kind, api_version)
        listed = client.get(resource, namespace=namespace, **selectors).to_dict()
    except (CoreException, DynamicApiError) as err:
        raise KubernetesError(f"cannot list {kind} ({api_version}): {_reason(err)}") from None
    items: list[dict[str, t.Any]] = listed.get("items", [])
    return items, str((listed.get("metadata") or {}).get("resourceVersion") or "")


def watch_changes(
    client: t.Any,
    api_version: str,
    kind: str,
    resource_version: str,
    timeout_s: float,
    namespace: str | None = None,
    **selectors: str,
) -> t.Iterator[tuple[str, JSON]]:
    """The changes to the selection after resource_version, as (ADDED, MODIFIED or DELETED,
    the object), for at most about timeout_s (whole seconds, the apiserver's unit). Ends
    early, without an error, when the watch cannot be opened or is cut off (the version too
    old, the connection lost): the caller looks again, so a lost watch costs time, never a
    wrong answer."""
    if Watch is None or not resource_version:
        return
    watcher = Watch()
    try:
        resource = client.resource(kind, api_version)
        for event in client.client.watch(
            resource,
            namespace=namespace,
            resource_version=resource_version,
            timeout=max(1, math.ceil(timeout_s)),
            watcher=watcher,
            **selectors,
        ):
            change, body = event.get("type"), event.get("raw_object")
            if change in ("ADDED", "MODIFIED", "DELETED") and isinstance(body, dict):
                yield change, body
    except (CoreException, DynamicApiError, ApiException, *TRANSPORT_ERRORS):
        return  # the version too old (410), the connection cut: look again
    finally:
        watcher.stop()


def _reason(err: Exception) -> str:
    """The apiserver's own message where there is one (it names the field at fault)."""
    status = getattr(err, "status", None)
    summary = getattr(err, "summary", None)
    reason = summary() if callable(summary) else getattr(err, "reason", None) or str(err)
    return f"HTTP {status}: {reason}" if status else str(reason)


class Conflict(KubernetesError):
    """Somebody else changed the object since it was read (HTTP 409)."""


def _status(err: Exception) -> int | None:
    status = getattr(err, "status", None)
    return int(status) if isinstance(status, int) else None


def get_object(
    client: t.Any, api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, t.Any] | None:
    """One object as a dict, or None when it does not exist."""
    try:
        resource = client.resource(kind, api_version)
        found = client.get(resource, name=name, namespace=namespace)
    except (CoreException, DynamicApiError) as err:
        if _status(err) == 404:
            return None
        raise KubernetesError(f"cannot read {kind} {name}: {_reason(err)}") from None
    obj: dict[str, t.Any] = found.to_dict()
    return obj


def write_object(client: t.Any, body: dict[str, t.Any], *, create: bool) -> dict[str, t.Any]:
    """Create `body`, or replace it with the resourceVersion it carries; Conflict on a race."""
    meta = body["metadata"]
    name = meta.get("name") or meta.get("generateName", "")
    try:
        resource = client.resource(body["kind"], body["apiVersion"])
        if create:
            written = client.create(resource, body, namespace=meta.get("namespace"))
        else:
            written = client.replace(
                resource, body, name=meta["name"], namespace=meta.get("namespace")
            )
    except (CoreException, DynamicApiError) as err:
        if _status(err) == 409:
            raise Conflict(f"{body['kind']} {name} changed meanwhile") from None
        raise KubernetesError(f"cannot write {body['kind']} {name}: {_reason(err)}") from None
    obj: dict[str, t.Any] = written.to_dict()
    return obj


class Refused(KubernetesError):
    """The apiserver refused a request; `status` is its HTTP status (None when the API
    has no such kind) and `message` its own words, which name a webhook that refused."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


def dry_run_create(client: t.Any, body: dict[str, t.Any]) -> dict[str, t.Any]:
    """Create `body` as a server-side dry run: the apiserver runs defaulting, the schema and
    every admission webhook, and stores nothing. The object it would store; Refused when
    it would not."""
    meta = body["metadata"]
    try:
        resource = client.resource(body["kind"], body["apiVersion"])
        created = client.create(resource, body, namespace=meta.get("namespace"), dry_run="All")
    except ResourceNotFoundError:
        raise Refused(None, f"the API has no {body['kind']} in {body['apiVersion']}") from None
    except TRANSPORT_ERRORS as err:
        raise Refused(None, f"cannot reach the apiserver: {err}") from None
    except (CoreException, DynamicApiError) as err:
        raise Refused(_status(err), _api_message(err)) from None
    obj: dict[str, t.Any] = created.to_dict()
    return obj


def _api_message(err: Exception) -> str:
    """The message of the Status the apiserver answered with, else the error's text."""
    body = getattr(err, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            return body
        message = status.get("message") if isinstance(status, dict) else None
        return str(message) if message else body
    return str(err)


def apply_object(client: t.Any, body: dict[str, t.Any], field_manager: str) -> dict[str, t.Any]:
    """Server-side apply of `body` as field_manager, taking over its fields from others."""
    meta = body["metadata"]
    try:
        resource = client.resource(body["kind"], body["apiVersion"])
        applied = client.patch(
            resource,
            body,
            name=meta["name"],
            namespace=meta.get("namespace"),
            content_type="application/apply-patch+yaml",
            field_manager=field_manager,
            force_conflicts=True,
        )
    except (CoreException, DynamicApiError) as err:
        raise KubernetesError(
            f"cannot apply {body['kind']} {meta['name']}: {_reason(err)}"
        ) from None
    obj: dict[str, t.Any] = applied.to_dict()
    return obj


def delete_object(
    client: t.Any,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    resource_version: str,
    grace_period_s: int | None = None,
    uid: str = "",
) -> None:
    """Delete an object only if it is still the version read (or, given its uid, the same
    object in any version); Conflict otherwise. A grace period (pods) replaces the object's
    own, also one that is already terminating."""
    precondition = {"uid": uid} if uid else {"resourceVersion": resource_version}
    options: dict[str, t.Any] = {"preconditions": precondition}
    if grace_period_s is not None:
        options["gracePeriodSeconds"] = grace_period_s
    try:
        resource = client.resource(kind, api_version)
        client.delete(resource, name=name, namespace=namespace, body=options)
    except (CoreException, DynamicApiError) as err:
        if _status(err) == 409:
            raise Conflict(f"{kind} {name} changed meanwhile") from None
        if _status(err) == 404:
            return
        raise KubernetesError(f"cannot delete {kind} {name}: {_reason(err)}") from None


def patch_object(
    client: t.Any,
    api_version: str,
    kind: str,
    name: str,
    patch: dict[str, t.Any],
    namespace: str | None = None,
) -> dict[str, t.Any]:
    """A JSON merge patch; one that carries metadata.resourceVersion is refused (Conflict)
    when the object changed since that version was read."""
    try:
        resource = client.resource(kind, api_version)
        patched = client.patch(
            resource,
            patch,
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )
    except (CoreException, DynamicApiError) as err:
        if _status(err) == 409:
            raise Conflict(f"{kind} {name} changed meanwhile") from None
        raise KubernetesError(f"cannot patch {kind} {name}: {_reason(err)}") from None
    obj: dict[str, t.Any] = patched.to_dict()
    return obj


def secret_ref_spec(default_key: str) -> dict[str, t.Any]:
    """The options of a reference to one key of a Secret."""
    return {
        "type": "dict",
        "options": {
            "namespace": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
            "key": {"type": "str", "default": default_key, "no_log": False},
        },
    }


def secret_bytes(client: t.Any, ref: t.Mapping[str, str]) -> bytes:
    """The bytes of one key of a Secret; KubernetesError naming the Secret when it is not there."""
    where = f"Secret {ref['namespace']}/{ref['name']}"
    secret = get_object(client, "v1", "Secret", ref["name"], ref["namespace"])
    if secret is None:
        raise KubernetesError(f"{where} does not exist")
    encoded = (secret.get("data") or {}).get(ref["key"])
    if not encoded:
        raise KubernetesError(f"{where} has no key {ref['key']} (yet)")
    try:
        return base64.b64decode(encoded)
    except ValueError:
        raise KubernetesError(f"{where}: key {ref['key']} is not base64") from None


def secret_value(client: t.Any, ref: t.Mapping[str, str]) -> str:
    """The text of one key of a Secret; KubernetesError naming the Secret when it is not there."""
    try:
        return secret_bytes(client, ref).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise KubernetesError(
            f"Secret {ref['namespace']}/{ref['name']}: key {ref['key']} is not text"
        ) from None
