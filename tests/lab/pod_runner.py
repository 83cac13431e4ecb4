# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs some of the lab's pods for real, as host processes, where a kubelet would run containers.

kwok marks every pod on its nodes Running without running anything.  For the pods whose
programs the lab can run on this machine, this runner plays the kubelet: it watches the
apiserver, starts the real program when such a pod is Running, restarts it when it exits,
and stops it (SIGTERM, then SIGKILL) when the pod is gone or terminating.

Known pods (by the last path element of a container image's repository):

* ``slurm-operator``: the real operator binary from ``k8s_binaries.py`` of the release the
  image's tag names (so an upgrade of the chart changes the program too), with the pod's
  own arguments, the listen addresses moved to 127.0.0.1, and a kubeconfig holding a token
  of the pod's service account (so the chart's RBAC is what the operator gets).  ``DEBUG=1``
  makes the operator reach slurmrestd at ``http://localhost:6820`` instead of a Service
  name that only cluster DNS resolves.
* ``slurm-bridge-scheduler``, ``slurm-bridge-controllers``: slurm-bridge's real programs
  from ``k8s_binaries.py`` (built from ``../shared/sources``; without them such pods stay
  kwok's), in the Slurm pods' chroot on the host network with the pod's volumes where its
  container mounts them, its service account's token where in-cluster clients look, and
  ``SLURM_JWT`` from the pod's Secret; their ports moved off those of the lab's own
  kube-scheduler; only the chart's pods (their container mounts the bridge's configuration),
  not a test's stand-ins.  (The admission webhook is not run: the apiserver would reach it
  through a Service, and the lab has no kube-proxy.)
* ``slurmctld``, ``slurmrestd``, ``slurmd``: the real Slurm 26.05 daemons, see
  ``slurm_pods.py`` (their volumes, network namespaces and hostnames).  kwok leaves a slurmd
  pod not Ready (``k8s_lab.pod_stages``); the runner marks it Ready once slurmd answers the
  chart's readiness probe (``GET /readyz`` on its ``slurmd`` port) and not Ready when
  slurmd exits, and writes that again whenever the pod's status says otherwise, as a
  kubelet does.

A pod the runner runs carries its annotation ``lab.hpcops.io/run-by`` (set before its
program starts), which keeps kwok's own deletion stage off it: as a kubelet does, the runner
runs the preStop hooks of the pods being deleted, stops their programs (each as soon as it
is seen deleted, as each node's kubelet would: the runner follows the stops while it goes on
looking, it never waits on one) and only then deletes the pod objects with no grace left.  So
nothing that watches pods sees one go while its program still runs.  A watch on the pods
wakes the runner as soon as one changes; it lists them at least every POLL_S seconds.

The runner is started by ``k8s_lab.py up`` and stopped by ``k8s_lab.py down``; it writes
one log per pod in ``<run dir>/log/pods/`` and keeps nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import k8s_binaries
from slurm_pods import SlinkyCluster, SlurmPod, describe, image_name, image_tag
from toolbox import LabError, Mount, chroot_setup

# The longest wait between two looks when no pod changes (a change wakes the runner at
# once). What it then notices late: a program that exited (restarted up to this much later;
# a kubelet's first back-off is 10 s) and a deleted Node whose pods are not deleted with it.
# Each look is two LISTs and a new watch: a look every second was 2.6 % of a core of the
# idle lab's apiserver and runner.
POLL_S = 5.0
# After a failed look (the apiserver restarting), the next one.
SYNC_RETRY_S = 1.0
# The least time between two looks, however often the pods change.
MIN_SYNC_GAP_S = 0.05
# Marks the pods the runner runs; kwok's deletion stage leaves them to the runner.
RUN_BY_ANNOTATION = "lab.hpcops.io/run-by"
RUN_BY_VALUE = "pod-runner"
# How often mounted ConfigMaps and Secrets are compared with the apiserver's (the chart's
# reconfigure sidecar polls every 5 s too).
REFRESH_S = 5.0
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STOP_GRACE_S = 10.0
# What the runner writes beside its looks (pods' readiness, the objects of pods that stopped),
# by at most this many calls at once.
WRITE_WORKERS = 16
TOKEN_LIFETIME_S = 24 * 3600
# Host ports for the operator's health and metrics endpoints (its defaults are :8081/:8080).
OPERATOR_HEALTH_ADDR = "127.0.0.1:16481"
OPERATOR_METRICS_ADDR = "127.0.0.1:16482"
# slurm-bridge's programs the runner runs (the image's last path element), and the flags
# that move their listeners off the host ports the lab's kube-scheduler and others hold.
BRIDGE_PROGRAMS = {
    "slurm-bridge-scheduler": ("--secure-port", "16484"),
    "slurm-bridge-controllers": ("--health-probe-bind-address", "127.0.0.1:16485"),
}
BRIDGE_BIN_DIR = "/opt/hpcops-lab/bin"  # where the lab's binaries are mounted in the chroot
BRIDGE_CONFIG_DIR = "/etc/slurm-bridge"  # where the chart mounts the bridge's configuration
# Where in-cluster clients read their token (/var/run/secrets/...): the chroot's /var/run is
# a link to /run, which a mount must name itself (mounts are made from outside the chroot).
SERVICE_ACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"
# The pods a kubelet runs: those bound to a node, in phase Running.
RUNNING_SELECTOR = "fieldSelector=status.phase%3DRunning"
# slurmd's port when its container names none (Slurm's default SlurmdPort).
SLURMD_PORT = 6818
PROBE_TIMEOUT_S = 1.0
# How soon the runner looks again while a readiness probe waits for its answer.
PROBE_LOOK_S = 0.1
# How soon it looks again while pods stop (their preStop hooks run, their programs end): a
# stop is followed, never waited for, so that pods deleted meanwhile start stopping at once.
STOP_LOOK_S = 0.05


def log(message: str) -> None:
    now = time.time()
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now * 1000) % 1000:03d}"
    print(f"[pod-runner] {stamp} {message}", file=sys.stderr, flush=True)


def replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    """args with `flag value` (or `flag=value`) set to value, appended when absent."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return [*out, flag, value]


def operator_binary(image: str) -> Path:
    """The lab's build of the operator release an image names; LabError (the pod waits, as
    for an image being pulled) when that release is not built."""
    version = "v" + image_tag(image).lstrip("v")
    path = k8s_binaries.slinky_operator(version).path
    if not path.exists():
        raise LabError(
            f"no slurm-operator {version} built for image {image}: the lab builds "
            f"{', '.join(k8s_binaries.SLINKY_VERSIONS)} (tests/lab/k8s_binaries.py)"
        )
    return path


@dataclass(frozen=True)
class PodObject:
    """Which pod object to delete: its uid is the delete's precondition."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> PodObject:
        meta = manifest["metadata"]
        return cls(meta["namespace"], meta["name"], meta["uid"])


@dataclass
class Stopping:
    """A pod on its way out, as a kubelet stops it: its preStop hook (hook), then SIGTERM
    to its program and SIGKILL at the deadline; done when the program has ended."""

    pod: RunningPod
    deadline: float
    hook: subprocess.Popen[str] | None = None
    terminated: bool = False
    # The pod object was deleted (not its Node, not the runner stopping): it goes as soon as
    # the program has ended, without waiting for the next list.
    delete_object: bool = False


@dataclass
class RunningPod:
    """One pod run as a host process."""

    uid: str
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    slurm: SlurmPod | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    files: list[Path] = field(default_factory=list)
    # The readiness probe's URL, for pods whose readiness the runner reports.
    ready_url: str | None = None
    ready: bool = False
    probe: ReadinessProbe | None = None
    # A program run in a chroot with mounts of its own (slurm-bridge's); Slurm pods carry
    # theirs in `slurm`.
    root: Path | None = None
    mounts: list[Mount] = field(default_factory=list)

    def preexec(self) -> Any:
        if self.slurm is not None:
            return self.slurm.preexec()
        if self.root is not None:
            return chroot_setup(self.root, mounts=self.mounts)
        return None


class PodRunner:
    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.pods: dict[str, RunningPod] = {}
        self.ending: dict[str, Stopping] = {}  # by uid: pods whose programs are stopping
        # Readiness reports and pod deletes are written side by side, as the kubelets of the
        # pods' nodes would, while the runner goes on looking (32 readiness reports written
        # one after the other held up the stop of pods deleted meanwhile by 0.5 s); its
        # threads keep their connections to the apiserver.
        self.writer = ThreadPoolExecutor(max_workers=WRITE_WORKERS)
        self.deleting: set[str] = set()  # uids deleted or being deleted, while listed
        self.reporting: set[str] = set()  # uids whose readiness report is under way
        self.pod_dir = lab.run_dir / "pods"
        self.log_dir = lab.run_dir / "log" / "pods"
        self.stopping = False
        self.slinky = SlinkyCluster(lab)
        self.next_refresh = 0.0

    # ---- what to run -----------------------------------------------------------------

    def spec_for(self, pod: dict[str, Any]) -> RunningPod | None:
        """How to run pod on this machine, or None when the lab does not run it."""
        containers = pod["spec"].get("containers", [])
        if len(containers) == 1 and image_name(containers[0].get("image", "")) == "slurm-operator":
            return self.operator_spec(pod, containers[0])
        if len(containers) == 1 and image_name(containers[0].get("image", "")) in BRIDGE_PROGRAMS:
            return self.bridge_spec(pod, containers[0])
        slurm = self.slinky.spec_for(pod)
        if slurm is None:
            return None
        meta = pod["metadata"]
        return RunningPod(
            uid=meta["uid"],
            name=f"{meta['namespace']}/{meta['name']}",
            argv=slurm.argv,
            env=slurm.env,
            log_path=self.log_dir / f"{meta['namespace']}_{meta['name']}.log",
            slurm=slurm,
            ready_url=readiness_url(pod, slurm),
        )

    def operator_spec(self, pod: dict[str, Any], container: dict[str, Any]) -> RunningPod:
        meta = pod["metadata"]
        workdir = self.pod_dir / meta["uid"]
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = workdir / "kubeconfig"
        token = self.service_account_token(
            meta["namespace"], pod["spec"].get("serviceAccountName", "default")
        )
        self.lab.write_kubeconfig(kubeconfig, f"system:serviceaccount:{meta['namespace']}", token)
        args = list(container.get("args", []))
        args = replace_flag(args, "--health-addr", OPERATOR_HEALTH_ADDR)
        args = replace_flag(args, "--metrics-addr", OPERATOR_METRICS_ADDR)
        args = replace_flag(args, "--kubeconfig", str(kubeconfig))
        binary = operator_binary(container.get("image", ""))
        return RunningPod(
            uid=meta["uid"],
            name=f"{meta['namespace']}/{meta['name']}",
            argv=[str(binary), *args],
            env={
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": str(workdir),
                "LC_ALL": "C",
                "DEBUG": "1",
            },
            log_path=self.log_dir / f"{meta['namespace']}_{meta['name']}.log",
            cwd=workdir,
            files=[kubeconfig],
        )

    def bridge_spec(self, pod: dict[str, Any], container: dict[str, Any]) -> RunningPod | None:
        """slurm-bridge's scheduler or controllers, as their container runs them; None (kwok's
        pod) when the lab has no build of the bridge."""
        program = image_name(container["image"])
        binary = k8s_binaries.BINARIES.get(program)
        if binary is None or not binary.path.exists():
            return None
        if not any(
            m["mountPath"].rstrip("/") == BRIDGE_CONFIG_DIR
            for m in container.get("volumeMounts", [])
        ):
            return None  # not the chart's pod (a test's stand-in): nothing to run it with
        meta = pod["metadata"]
        namespace = meta["namespace"]
        workdir = self.pod_dir / meta["uid"]
        self.slinky.prepare()
        self.slinky.materialize(pod, workdir, (0, 0))
        account = workdir / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        token = account / "token"
        token.touch(mode=0o600)
        token.write_text(
            self.service_account_token(namespace, pod["spec"].get("serviceAccountName", "default"))
        )
        (account / "ca.crt").write_bytes(self.lab.ca_path.read_bytes())
        (account / "namespace").write_text(namespace)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/tmp",
            "LC_ALL": "C",
            # In-cluster clients (client-go's rest.InClusterConfig) find the apiserver here.
            "KUBERNETES_SERVICE_HOST": urllib.parse.urlsplit(self.lab.url).hostname or "",
            "KUBERNETES_SERVICE_PORT": str(urllib.parse.urlsplit(self.lab.url).port),
        }
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "secretKeyRef" in item.get("valueFrom", {}):
                ref = item["valueFrom"]["secretKeyRef"]
                data = self.slinky.object_data("secret", namespace, ref["name"]) or {}
                if ref["key"] not in data:
                    raise LabError(f"secret {namespace}/{ref['name']} has no {ref['key']} yet")
                env[item["name"]] = data[ref["key"]].decode()
        flag, value = BRIDGE_PROGRAMS[program]
        args = replace_flag(list(container.get("args", [])), flag, value)
        mounts = [
            Mount(target="/proc", fstype="proc"),
            Mount(target="/tmp", source=str(self.scratch(workdir))),
            Mount(target="/etc/hosts", source=str(self.slinky.hosts_path), read_only=True),
            Mount(target=BRIDGE_BIN_DIR, source=str(binary.path.parent), read_only=True),
            Mount(target=SERVICE_ACCOUNT_DIR, source=str(account), read_only=True),
            *self.slinky.volume_mounts(container, workdir),
        ]
        return RunningPod(
            uid=meta["uid"],
            name=f"{namespace}/{meta['name']}",
            argv=[f"{BRIDGE_BIN_DIR}/{binary.path.name}", *args],
            env=env,
            log_path=self.log_dir / f"{namespace}_{meta['name']}.log",
            files=[token],
            root=self.slinky.root,
            mounts=mounts,
        )

    @staticmethod
    def scratch(workdir: Path) -> Path:
        path = workdir / "tmp"
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o1777)
        return path

    def service_account_token(self, namespace: str, account: str) -> str:
        status, body = self.lab.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_LIFETIME_S},
            },
        )
        if status != 201 or not isinstance(body, dict):
            raise LabError(f"token for {namespace}/{account} answered {status}: {body}")
        return str(body["status"]["token"])

    # ---- the loop --------------------------------------------------------------------

    def running_pods(self) -> tuple[dict[str, dict[str, Any]], str]:
        """Pods in phase Running (terminating ones too) by uid, and the list's resourceVersion."""
        body = self.lab.get(f"/api/v1/pods?{RUNNING_SELECTOR}")
        pods = {pod["metadata"]["uid"]: pod for pod in body["items"]}
        return pods, str(body["metadata"].get("resourceVersion", ""))

    def node_names(self) -> set[str]:
        return {node["metadata"]["name"] for node in self.lab.get("/api/v1/nodes")["items"]}

    def sync(self) -> str:
        """One look at the pods: start, stop and report what changed. Returns the
        resourceVersion of the pods it saw."""
        running, resource_version = self.running_pods()
        wanted = {
            uid: pod for uid, pod in running.items() if not pod["metadata"].get("deletionTimestamp")
        }
        # A deleted Node is a machine that is gone: no kubelet runs a preStop hook or stops
        # its pods cleanly, they just end (as when the power goes), until the pod garbage
        # collector deletes the pod objects.
        nodes = self.node_names()
        machine_gone = {
            uid for uid, manifest in wanted.items() if manifest["spec"].get("nodeName") not in nodes
        }
        ending = [uid for uid in self.pods if uid not in wanted or uid in machine_gone]
        if ending:
            self.start_stopping(
                [self.pods.pop(uid) for uid in ending],
                hooks={uid: uid not in machine_gone for uid in ending},
                deleted={uid for uid in ending if uid in running and uid not in wanted},
            )
        stopped = self.follow_stops()
        hosts_changed = any(pod.slurm is not None for pod in stopped)
        # Pods of ours that are being deleted and whose programs have stopped (just now, or
        # before a restart of the runner): the kubelet's last word, the object goes. A delete
        # that went through is not sent again while a list still shows the pod.
        self.deleting.intersection_update(running)
        self.delete_terminated(
            [
                PodObject.of(manifest)
                for uid, manifest in running.items()
                if uid not in self.pods
                and uid not in self.ending
                and manifest["metadata"].get("deletionTimestamp")
                and self.runs(manifest)
            ]
        )
        for uid, manifest in wanted.items():
            if uid in machine_gone or uid in self.pods or uid in self.ending:
                continue
            try:
                spec = self.spec_for(manifest)
            except LabError as err:  # a ConfigMap not written yet: the kubelet waits too
                log(f"not starting {manifest['metadata']['name']} yet: {err}")
                continue
            if spec is None:
                continue
            if not self.claim(manifest):
                self.discard(spec)
                continue
            self.pods[uid] = spec
            hosts_changed |= spec.slurm is not None
        if hosts_changed:
            self.slinky.write_hosts(self.slinky.services())
        if time.monotonic() >= self.next_refresh:
            self.next_refresh = time.monotonic() + REFRESH_S
            self.refresh_volumes(wanted)
        for pod in self.pods.values():
            self.keep_running(pod)
        # A probe in flight is looked at, never waited for, as a kubelet probes beside its
        # other work: a slurmd slow to answer while it registers (up to the probe's timeout)
        # must not hold up the next look at pods being deleted.
        for uid, pod in self.pods.items():
            if pod.ready_url:
                self.keep_readiness(pod, wanted[uid], self.probe_answer(pod))
        return resource_version

    def probing(self) -> bool:
        return any(pod.probe is not None for pod in self.pods.values())

    @staticmethod
    def probe_answer(pod: RunningPod) -> bool:
        """The readiness probe's answer so far: a probe is started when the program runs and
        is not ready; False until it answers."""
        if pod.ready or pod.process is None or pod.process.poll() is not None:
            pod.probe = None
            return pod.ready
        if pod.probe is None:
            pod.probe = ReadinessProbe(pod.ready_url or "")
        answer = pod.probe.answer()
        if answer is None:
            return False
        pod.probe = None
        return answer

    @staticmethod
    def runs(manifest: dict[str, Any]) -> bool:
        annotations = manifest["metadata"].get("annotations") or {}
        return annotations.get(RUN_BY_ANNOTATION) == RUN_BY_VALUE

    def claim(self, manifest: dict[str, Any]) -> bool:
        """Mark a pod as the runner's before its program starts (kwok then leaves its
        deletion to the runner); False when it is gone or already being deleted."""
        if self.runs(manifest):
            return True
        meta = manifest["metadata"]
        status, body = self.lab.request(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"metadata": {"uid": meta["uid"], "annotations": {RUN_BY_ANNOTATION: RUN_BY_VALUE}}},
            content_type="application/merge-patch+json",
        )
        if status != 200 or not isinstance(body, dict):
            said = body.get("message") if isinstance(body, dict) else body
            log(
                f"not starting {meta['namespace']}/{meta['name']} yet: marking it answered "
                f"{status} ({said})"
            )
            return False
        return not body["metadata"].get("deletionTimestamp")

    def discard(self, spec: RunningPod) -> None:
        """Give back what spec_for set aside for a pod that is not started after all: its
        address and network namespace. The next look makes a new spec, and a second address
        for the same hostname in /etc/hosts sent slurmrestd to the empty one (a cold run:
        every NodeSet stuck on `Unable to contact slurm controller`)."""
        if spec.slurm is not None:
            self.slinky.release_pods([(spec.uid, spec.slurm)])

    def delete_terminated(self, pods: list[PodObject]) -> None:
        """Delete pods whose programs have stopped, with no grace left, as a kubelet does
        once its containers have ended (only those pods: each uid is a precondition). Never
        waited for: the next look leaves alone the deletes still under way."""
        for pod in pods:
            if pod.uid in self.deleting:
                continue
            self.deleting.add(pod.uid)
            self.writer.submit(self.delete_one_terminated, pod).add_done_callback(
                lambda done, uid=pod.uid: done.result() or self.deleting.discard(uid)
            )

    def delete_one_terminated(self, pod: PodObject) -> bool:
        """Delete one pod; False when the apiserver refused or did not answer (the next
        look tries again)."""
        try:
            status, body = self.lab.request(
                "DELETE",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}},
            )
        except LabError as err:  # the apiserver restarting
            log(f"deleting {pod.namespace}/{pod.name} failed: {err}")
            return False
        if status not in (200, 404, 409):  # 404/409: gone already, or a new pod of that name
            log(f"deleting {pod.namespace}/{pod.name} answered {status}: {body}")
            return False
        log(f"deleted {pod.namespace}/{pod.name}")
        return True

    def wait_for_change(self, resource_version: str, timeout_s: float = POLL_S) -> None:
        """Sleep until a pod changes after resource_version, at most timeout_s: a watch used
        only to wake the loop (the next look lists the pods anew)."""
        deadline = time.monotonic() + timeout_s
        time.sleep(MIN_SYNC_GAP_S)
        if time.monotonic() >= deadline:  # a look due this soon needs no watch
            return
        req = urllib.request.Request(  # noqa: S310 - the lab's own apiserver
            f"{self.lab.url}/api/v1/pods?{RUNNING_SELECTOR}&watch=true"
            f"&resourceVersion={resource_version}&allowWatchBookmarks=false",
            headers={"Authorization": f"Bearer {self.lab.token()}"},
        )
        try:
            context = ssl.create_default_context(cafile=str(self.lab.ca_path))
            with urllib.request.urlopen(req, timeout=timeout_s, context=context) as stream:  # noqa: S310
                stream.read(1)  # the first event, or a timeout
            return
        except (OSError, ValueError):  # timed out, refused, or the version too old
            pass
        time.sleep(max(0.0, deadline - time.monotonic()))

    def refresh_volumes(self, manifests: dict[str, dict[str, Any]]) -> None:
        """New ConfigMap and Secret contents into the Slurm pods' files; reconfigure slurmctld."""
        if self.slinky.addresses:  # Services may have come or changed their selectors
            self.slinky.write_hosts(self.slinky.services())
        for uid, pod in self.pods.items():
            if pod.slurm is None or not self.slinky.refresh(manifests[uid], pod.slurm):
                continue
            log(f"{pod.name}: mounted ConfigMaps or Secrets changed")
            if pod.slurm.kind == "slurmctld":
                done = pod.slurm.exec("scontrol", "reconfigure")
                outcome = "done" if done.returncode == 0 else f"failed: {done.stderr.strip()}"
                log(f"{pod.name}: scontrol reconfigure {outcome}")

    def keep_running(self, pod: RunningPod) -> None:
        if pod.process is not None and pod.process.poll() is None:
            return
        if pod.process is not None:
            log(f"{pod.name} exited with {pod.process.returncode}; see {pod.log_path}")
            pod.process = None
            pod.restarts += 1
            backoff = RESTART_BACKOFF_S[min(pod.restarts - 1, len(RESTART_BACKOFF_S) - 1)]
            pod.next_start = time.monotonic() + backoff
        if time.monotonic() < pod.next_start:
            return
        pod.log_path.parent.mkdir(parents=True, exist_ok=True)
        with pod.log_path.open("ab") as out:
            pod.process = subprocess.Popen(
                pod.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=pod.env,
                cwd=pod.cwd,
                start_new_session=True,
                # Safe beside the runner's deleting threads: the function makes system
                # calls only, and takes no lock one of them could hold at the fork.
                preexec_fn=pod.preexec(),  # noqa: PLW1509
            )
        what = describe(pod.slurm) if pod.slurm else pod.argv[0]
        log(f"started {pod.name} as pid {pod.process.pid}: {what} (restarts: {pod.restarts})")

    def keep_readiness(self, pod: RunningPod, manifest: dict[str, Any], probed: bool) -> None:
        """Until the program is ready, take the probe's answer so far (probed), and keep the
        pod's status saying it, as a kubelet's status manager does: another writer of the
        pod's conditions (the Slinky operator patches its own in from an older copy) may
        undo ours."""
        if pod.process is None or pod.process.poll() is not None:
            pod.ready = False
        elif not pod.ready:
            pod.ready = probed
        shown = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in manifest["status"].get("conditions") or []
        )
        if shown != pod.ready and pod.uid not in self.reporting:  # the next look sees it
            self.reporting.add(pod.uid)
            self.writer.submit(self.report_ready, pod, pod.ready, manifest).add_done_callback(
                lambda _done, uid=pod.uid: self.reporting.discard(uid)
            )

    def report_ready(self, pod: RunningPod, ready: bool, manifest: dict[str, Any]) -> None:
        """The pod's Ready and ContainersReady conditions and its containers' ready flags,
        as a kubelet writes them after a probe."""
        value = "True" if ready else "False"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {
            "status": {
                "conditions": [
                    {"type": kind, "status": value, "lastTransitionTime": now}
                    for kind in ("ContainersReady", "Ready")
                ],
                # A list without a merge key in PodStatus: the patch replaces it whole.
                "containerStatuses": [
                    {**c, "ready": ready} for c in manifest["status"].get("containerStatuses") or []
                ],
            }
        }
        namespace, name = pod.name.split("/", 1)
        try:
            status, body = self.lab.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                patch,
                content_type="application/strategic-merge-patch+json",
            )
        except LabError as err:  # the apiserver restarting: the next look reports again
            log(f"{pod.name}: marking it ready={ready} failed: {err}")
            return
        if status != 200:
            log(f"{pod.name}: marking it ready={ready} answered {status}: {body}")
            return
        log(f"{pod.name}: {'Ready' if ready else 'not Ready'} ({pod.ready_url})")

    def start_stopping(
        self, pods: list[RunningPod], *, hooks: dict[str, bool], deleted: Collection[str] = ()
    ) -> None:
        """Begin to stop pods, as their nodes' kubelets would: a pod whose Node is gone is
        killed (no hook, no grace); the others' preStop hooks start, each followed by
        SIGTERM to its program once it ends or has had STOP_GRACE_S. follow_stops takes
        them on from there, and deletes the objects of the `deleted` uids once stopped."""
        log(f"stopping {', '.join(pod.name for pod in pods)}")
        now = time.monotonic()
        for pod in pods:
            if pod.probe is not None:
                pod.probe.close()
                pod.probe = None
            stopping = Stopping(pod, deadline=now + STOP_GRACE_S, delete_object=pod.uid in deleted)
            self.ending[pod.uid] = stopping
            process = pod.process
            if process is None or process.poll() is not None:
                continue
            if not hooks[pod.uid]:
                process.kill()
                log(
                    f"{pod.name}: its Node is gone; killed pid {process.pid} without its preStop hook"
                )
            elif pod.slurm and pod.slurm.pre_stop:
                stopping.hook = pod.slurm.start_exec(*pod.slurm.pre_stop)

    def follow_stops(self) -> list[RunningPod]:
        """Take each stopping pod a step on (its hook ended or out of time: SIGTERM; its
        grace over: SIGKILL) and clean up after those whose programs have ended; those pods."""
        now = time.monotonic()
        stopped: list[RunningPod] = []
        gone: list[PodObject] = []
        for uid, stopping in list(self.ending.items()):
            pod, process = stopping.pod, stopping.pod.process
            if stopping.hook is not None:
                if stopping.hook.poll() is None and now < stopping.deadline:
                    continue
                self.end_hook(pod, stopping.hook)
                stopping.hook = None
                stopping.deadline = now + STOP_GRACE_S
            if process is not None and process.poll() is None:
                if not stopping.terminated:
                    process.terminate()
                    stopping.terminated = True
                    continue
                if now < stopping.deadline:
                    continue
                process.kill()
                process.wait()
            if process is not None:
                log(f"stopped {pod.name} (pid {process.pid})")
            for path in pod.files:
                path.unlink(missing_ok=True)  # the service account token goes with the pod
            del self.ending[uid]
            stopped.append(pod)
            if stopping.delete_object:
                gone.append(PodObject(*pod.name.split("/", 1), uid))
        # One release for the pods that ended in this look: a scan of the chroot's processes.
        released = [(pod.uid, pod.slurm) for pod in stopped if pod.slurm is not None]
        if released:
            self.slinky.release_pods(released)
        self.delete_terminated(gone)
        return stopped

    def follow_exits(self, timeout_s: float) -> None:
        """For timeout_s, take each stopping pod on the moment its hook or program ends, as
        a kubelet's pod workers do: a look at the apiserver's pods in between is not waited
        for (a step a look was 0.1 s for one pod, 1.2 s for 32 stopped together)."""
        deadline = time.monotonic() + timeout_s
        while self.ending:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.wait_for_exit(left)
            self.follow_stops()

    def wait_for_exit(self, timeout_s: float) -> None:
        """Sleep until a running hook, or a program past its hook, ends: at most timeout_s."""
        waited = [
            process
            for stopping in self.ending.values()
            for process in [stopping.hook if stopping.hook is not None else stopping.pod.process]
            if process is not None and process.returncode is None
        ]
        pidfds = []
        try:
            for process in waited:
                with contextlib.suppress(OSError):  # reaped meanwhile: follow_stops sees it
                    pidfds.append(os.pidfd_open(process.pid))
            if pidfds:
                select.select(pidfds, [], [], timeout_s)
            else:
                time.sleep(timeout_s)
        finally:
            for pidfd in pidfds:
                os.close(pidfd)

    @staticmethod
    def end_hook(pod: RunningPod, hook: subprocess.Popen[str]) -> None:
        """A preStop hook that ended, or has had its STOP_GRACE_S: a kubelet stops the
        container all the same (slurmctld being replaced at that moment leaves scontrol
        waiting)."""
        if hook.poll() is None:
            hook.kill()
            hook.communicate()
            log(f"{pod.name}: preStop hook still running after {STOP_GRACE_S:g} s: killed")
            return
        _out, err = hook.communicate()
        log(f"{pod.name}: preStop hook exited with {hook.returncode} {err.strip()}")

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        log(f"watching pods on {self.lab.url}")
        while not self.stopping:
            try:
                resource_version = self.sync()
            except LabError as err:  # the apiserver restarting: try again next round
                log(f"sync failed: {err}")
                self.follow_stops()  # stopping pods need no apiserver
                time.sleep(SYNC_RETRY_S)
                continue
            # Until the next look is due: a stop's (its exits followed meanwhile), a probe's,
            # the volumes' refresh, or POLL_S.
            if self.ending:
                self.follow_exits(STOP_LOOK_S)
                continue
            until_refresh = max(PROBE_LOOK_S, self.next_refresh - time.monotonic())
            wait_s = PROBE_LOOK_S if self.probing() else min(POLL_S, until_refresh)
            self.wait_for_change(resource_version, wait_s)
        self.start_stopping(list(self.pods.values()), hooks=dict.fromkeys(self.pods, True))
        self.pods.clear()
        while self.ending:
            self.follow_exits(STOP_LOOK_S)
        self.writer.shutdown(wait=True)
        log("stopped")

    def on_signal(self, signum: int, _frame: object) -> None:
        self.stopping = True


def readiness_url(pod: dict[str, Any], slurm: SlurmPod) -> str | None:
    """Where a kubelet would send a slurmd pod's readiness probe: slurmd's HTTP endpoint on
    the pod's address and its container's `slurmd` port (the Slinky chart's probe)."""
    if slurm.kind != "slurmd" or not slurm.address:
        return None
    ports = [
        port.get("containerPort")
        for container in pod["spec"].get("containers", [])
        for port in container.get("ports") or []
        if port.get("name") == "slurmd"
    ]
    return f"http://{slurm.address}:{ports[0] if ports else SLURMD_PORT}/readyz"


class ReadinessProbe:
    """An HTTP readiness probe that never blocks: started at once, then looked at until it
    has its answer (2xx or 3xx: ready) or PROBE_TIMEOUT_S passed (not ready)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.request = f"GET {parts.path or '/'} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode()
        self.deadline = time.monotonic() + PROBE_TIMEOUT_S
        self.sent = False
        self.reply = b""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.connect_ex((parts.hostname or "", parts.port or 80))

    def answer(self) -> bool | None:
        """True or False once known, else None (ask again later)."""
        try:
            answer = self._look()
        except OSError:  # refused, reset: not ready
            answer = False
        if answer is None and time.monotonic() >= self.deadline:
            answer = False
        if answer is not None:
            self.close()
        return answer

    def close(self) -> None:
        self.sock.close()

    def _look(self) -> bool | None:
        readable, writable, _failed = select.select([self.sock], [self.sock], [], 0)
        if not self.sent:
            if not writable:
                return None  # still connecting
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                return False
            self.sock.sendall(self.request)
            self.sent = True
            return None
        if not readable:
            return None
        chunk = self.sock.recv(64)
        self.reply += chunk
        status_line = self.reply.split(b"\r\n", 1)[0].split()
        if len(status_line) >= 2 and status_line[1].isdigit():
            return 200 <= int(status_line[1]) < 400
        return False if not chunk else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the Kubernetes lab's runtime directory")
    args = parser.parse_args(argv)
    import k8s_lab  # noqa: PLC0415 - k8s_lab imports this module

    lab = k8s_lab.K8sLab()
    if str(lab.run_dir) != args.run_dir:
        raise SystemExit(f"--run-dir {args.run_dir} is not the lab's {lab.run_dir}")
    PodRunner(lab).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
