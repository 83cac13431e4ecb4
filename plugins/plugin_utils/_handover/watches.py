# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: list and watch one kind of Kubernetes object, for the handover event source.

A `KindWatch` runs in its own thread: it lists, then watches from the list's
resourceVersion, with bookmarks so a quiet watch still moves its resourceVersion on. A watch
that ends (the server's timeout, a restarted apiserver, a broken connection) resumes from the
last resourceVersion it saw; one that the server answers with 410 Gone (that version has
left the watch cache) lists again, and the list replaces everything known of the kind.
Errors back off exponentially up to ``backoff_max_s``. What it sees is handed to ``post``
as `WatchUpdate` values; ``stop`` ends the thread promptly by shutting its connection down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import typing as t
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# What a broken connection raises: the watch backs off and resumes.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError)
try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch.watch import iter_resp_lines
    from urllib3.exceptions import HTTPError as Urllib3Error

    HAS_KUBERNETES = True
    CONNECTION_ERRORS = (Urllib3Error, OSError, ValueError)
except ImportError:  # checked by api_client, before any watch starts
    HAS_KUBERNETES = False

    class ApiException(Exception):  # type: ignore[no-redef]  # never raised without the library
        status = 0
        reason = ""


LOG = logging.getLogger("hpcops.slinky.handover_events")

HTTP_GONE = 410
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"  # set in every pod


class UpdateKind:
    """What a `WatchUpdate` carries."""

    LISTED = "listed"  # every object of the kind (a first list, or a relist after 410)
    CHANGED = "changed"  # one watch event: ADDED, MODIFIED or DELETED
    LOST = "lost"  # the watch broke; the objects known are kept until it resumes


@dataclass(frozen=True)
class WatchUpdate:
    kind: str  # triggers.WatchedKind
    update: str  # UpdateKind
    event_type: str = ""
    objects: tuple[Mapping[str, t.Any], ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class WatchTarget:
    """What one KindWatch lists: the API call and its selectors."""

    kind: str
    list_call: Callable[..., t.Any]
    arguments: Mapping[str, t.Any] = field(default_factory=dict)


def api_client(kubeconfig: str = "", context: str = "") -> k8s_client.ApiClient:
    """A client from the kubeconfig (or its default), or the pod's service account."""
    if not HAS_KUBERNETES:
        raise ValueError(
            "the kubernetes Python library is needed: pip install -r requirements.txt "
            "(of the collection) where ansible-rulebook runs"
        )
    try:
        if not kubeconfig and not context and os.environ.get(SERVICE_HOST_ENV):
            try:
                configuration = k8s_client.Configuration()
                k8s_config.load_incluster_config(client_configuration=configuration)
                return _quiet_client(configuration)
            except k8s_config.ConfigException:
                pass  # not in a pod: the default kubeconfig
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(
            config_file=kubeconfig or None,
            context=context or None,
            client_configuration=configuration,
        )
        return _quiet_client(configuration)
    except (k8s_config.ConfigException, OSError) as err:
        where = f"kubeconfig {kubeconfig!r}" if kubeconfig else "the default kubeconfig"
        raise ValueError(
            f"cannot load {where}{f' (context {context!r})' if context else ''}: {err}"
        ) from None


def _quiet_client(configuration: k8s_client.Configuration) -> k8s_client.ApiClient:
    # The watches retry with their own backoff; urllib3's retries would only add noise.
    configuration.retries = 0
    return k8s_client.ApiClient(configuration)


def watch_targets(
    api: k8s_client.ApiClient,
    *,
    node_label_selector: str,
    lease_namespace: str,
    lease_name: str,
) -> list[WatchTarget]:
    """Pods everywhere, the pool's Nodes and the handover Lease."""
    core = k8s_client.CoreV1Api(api)
    coordination = k8s_client.CoordinationV1Api(api)
    return [
        WatchTarget("Pod", core.list_pod_for_all_namespaces),
        WatchTarget("Node", core.list_node, {"label_selector": node_label_selector}),
        WatchTarget(
            "Lease",
            coordination.list_namespaced_lease,
            {"namespace": lease_namespace, "field_selector": f"metadata.name={lease_name}"},
        ),
    ]


class KindWatch(threading.Thread):
    """List, then watch, one kind until stopped."""

    def __init__(
        self,
        target: WatchTarget,
        post: Callable[[WatchUpdate], None],
        *,
        watch_timeout_s: int = 300,
        backoff_max_s: float = 30.0,
    ) -> None:
        super().__init__(name=f"watch-{target.kind}", daemon=True)
        self.target = target
        self.post = post
        self.watch_timeout_s = watch_timeout_s
        self.backoff_max_s = backoff_max_s
        self.resource_version = ""
        self._stopping = threading.Event()
        self._response: t.Any = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        """End the thread: no more posts, and the open watch is shut down now."""
        self._stopping.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(OSError, AttributeError):  # already closed
                response.shutdown()

    def run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._watch()
                backoff = 0.5
            except ApiException as err:
                if err.status == HTTP_GONE:
                    LOG.info(
                        "%s: resourceVersion %s is gone (410): listing again",
                        self.target.kind,
                        self.resource_version,
                    )
                    self.resource_version = ""
                    continue
                self._lost(f"{err.status} {err.reason}", backoff)
                backoff = min(backoff * 2, self.backoff_max_s)
            except CONNECTION_ERRORS as err:
                self._lost(str(err) or type(err).__name__, backoff)
                backoff = min(backoff * 2, self.backoff_max_s)

    def _lost(self, reason: str, backoff: float) -> None:
        if self._stopping.is_set():
            return
        LOG.warning("%s watch: %s; again in %.1f s", self.target.kind, reason, backoff)
        self._emit(WatchUpdate(self.target.kind, UpdateKind.LOST, reason=reason))
        self._stopping.wait(backoff)

    def _emit(self, update: WatchUpdate) -> None:
        if not self._stopping.is_set():
            self.post(update)

    def _call(self, **arguments: t.Any) -> t.Any:
        response = self.target.list_call(
            **self.target.arguments, **arguments, _preload_content=False
        )
        with self._lock:
            self._response = response
        if self._stopping.is_set():
            response.shutdown()
        return response

    def _list(self) -> None:
        response = self._call(_request_timeout=(10, 60))
        try:
            listed = json.loads(response.data)
        finally:
            response.release_conn()
        self.resource_version = str(listed["metadata"]["resourceVersion"])
        self._emit(WatchUpdate(self.target.kind, UpdateKind.LISTED, objects=tuple(listed["items"])))

    def _watch(self) -> None:
        response = self._call(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_s,
            # Bookmarks come about once a minute; a silent connection longer than the
            # server's own timeout is a broken one.
            _request_timeout=(10, self.watch_timeout_s + 30),
        )
        try:
            for line in iter_resp_lines(response):
                if self._stopping.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    raise ApiException(status=code, reason=str(obj.get("message") or obj))
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = str(version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._emit(
                        WatchUpdate(self.target.kind, UpdateKind.CHANGED, kind, objects=(obj,))
                    )
        finally:
            with self._lock:
                self._response = None
            response.release_conn()
