# SPDX-License-Identifier: GPL-3.0-or-later
"""A real Kubernetes control plane on 127.0.0.1 for the hpcops.slinky tests, with kwok nodes.

``up`` starts, as plain host processes from the binaries of ``k8s_binaries.py``:

* etcd on ``127.0.0.1:12379`` (peer ``12380``), ``--unsafe-no-fsync``, data in the
  runtime directory;
* kube-apiserver on ``https://127.0.0.1:16443`` with RBAC (``--authorization-mode=Node,RBAC``),
  a static token file, a service-account signing key and issuer, and a serving certificate
  from the lab's own CA (made with ``openssl`` at each fresh ``up``);
* kube-controller-manager (``127.0.0.1:16457``) and kube-scheduler (``127.0.0.1:16459``)
  with their own token kubeconfigs and ``--leader-elect=false``;
* kwok (health on ``127.0.0.1:16480``), which keeps the lab's Node objects Ready and moves
  pods scheduled onto them to Running; it manages only nodes annotated
  ``kwok.x-k8s.io/node=fake``.  Its pod stages (``kwok-stages.yaml``, see ``pod_stages``)
  leave a slurmd pod not Ready: the pod runner probes the real slurmd's ``/readyz`` as a
  kubelet would, and marks the pod Ready then.

The nodes are shaped like a site (see NODES): an interactive pool, two of its nodes with
four A100 GPUs each and GPU feature discovery labels; a dedicated Slurm pool; a burst pool
(a dedicated pool that scales with demand); and a never-touch pool.  The pool is the label
``hpcops.io/pool``.  Node names are valid Slurm node names.

Also at ``up``: KEDA's CRDs, from KEDA's Go module (see ``k8s_binaries.keda_crds``), as on a
site whose platform runs KEDA; nothing acts on ScaledObjects here.  And a default
StorageClass ``lab-local`` with a few host directories as PersistentVolumes, so slurmctld's
state survives its pod as on a site (``slurm_pods.py`` mounts a claim's directory).  The pod runner
(``pod_runner.py``) runs the Slinky operator and the Slurm pods for real.

The admin kubeconfig is written to ``<repo>/.lab/kubeconfig`` and ``<repo>/.lab/bin`` links
``kubectl`` and ``helm``.  Everything else lives in ``$HPCOPS_LAB_RUN/k8s`` (default
``/run/hpcops-lab/k8s``): ``pki/``, ``etcd/``, ``log/``, the component kubeconfigs,
``tokens.csv`` and ``state.json`` (pids and command lines).

CLI::

    python3 tests/lab/k8s_lab.py {up,down,status,env} [--json]

Python API (used by the integration tests)::

    lab = K8sLab()
    lab.up()
    status, body = lab.request("GET", "/api/v1/nodes")
    lab.down()
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import k8s_binaries
import pod_runner
from k8s_binaries import KUBERNETES_VERSION
from slurm_lab import ensure_chroot
from slurm_pods import SLINKY_RELEASE, SlinkyCluster
from toolbox import (
    CACHE_DIR,
    LabError,
    RunDirState,
    health,
    is_zombie,
    json_or_text,
    logger,
    pid_exe,
    port_free,
    print_env,
    run_cli,
    stop_pids,
    undone_on_failure,
    wait_until,
)
from toolbox import RUN_DIR as LAB_RUN_DIR

RUN_DIR = LAB_RUN_DIR / "k8s"
REPO_LAB_DIR = Path(__file__).resolve().parents[2] / ".lab"
KUBECONFIG_PATH = REPO_LAB_DIR / "kubeconfig"
CLIENT_BIN_DIR = REPO_LAB_DIR / "bin"
CLIENT_TOOLS = ("kubectl", "helm")
CHARTS_LINK_DIR = REPO_LAB_DIR / "charts"
SLINKY_VERSION_FILE = REPO_LAB_DIR / "slinky-version"
# Host directories offered as PersistentVolumes of the default StorageClass (slurmctld's
# state in the slurm chart; a claim is never given back within one lab's life).
STORAGE_CLASS = "lab-local"
PERSISTENT_VOLUMES = 4

HOST = "127.0.0.1"
ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
APISERVER_PORT = 16443
CONTROLLER_MANAGER_PORT = 16457
SCHEDULER_PORT = 16459
KWOK_PORT = 16480
LAB_PORTS = (
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    APISERVER_PORT,
    CONTROLLER_MANAGER_PORT,
    SCHEDULER_PORT,
    KWOK_PORT,
)
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
POD_CIDR = "10.244.0.1/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOL_LABEL = "hpcops.io/pool"
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_MEMORY_MB = 81920

READYZ_DEADLINE_S = 90.0
NODES_DEADLINE_S = 60.0
STOP_GRACE_S = 10.0

EXIT_DOWN = 3
EXIT_DEGRADED = 1

# Start order; down stops them in reverse.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "pod-runner",
)
BINARY_COMPONENTS = COMPONENTS[:-1]  # built by k8s_binaries.py
POD_RUNNER = Path(__file__).resolve().parent / "pod_runner.py"
# Users of the static token file: name -> groups.  The controller-manager and the scheduler
# get the identities their bootstrap RBAC roles are bound to; kwok writes the status of
# every node and pod, so it is an administrator like the lab's admin.
TOKEN_USERS = {
    "hpcops-lab-admin": "system:masters",
    "system:kube-controller-manager": "",
    "system:kube-scheduler": "",
    "kwok-controller": "system:masters",
}
ADMIN_USER = "hpcops-lab-admin"
COMPONENT_USERS = {
    "kube-controller-manager": "system:kube-controller-manager",
    "kube-scheduler": "system:kube-scheduler",
    "kwok": "kwok-controller",
}


log = logger("k8s-lab")


class ComponentExited(LabError):
    """A lab process died while the lab waited for it."""


@dataclass(frozen=True)
class LabNode:
    """A kwok Node: name (also a valid Slurm node name), pool and capacity."""

    name: str
    pool: str
    cpus: int
    memory_gib: int
    gpus: int = 0

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            POOL_LABEL: self.pool,
        }
        capacity = {
            "cpu": str(self.cpus),
            "memory": f"{self.memory_gib}Gi",
            "ephemeral-storage": "800Gi",
            "pods": "110",
        }
        if self.gpus:
            # What NVIDIA's GPU feature discovery and device plugin publish.
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": GPU_PRODUCT,
                "nvidia.com/gpu.count": str(self.gpus),
                "nvidia.com/gpu.memory": str(GPU_MEMORY_MB),
            }
            capacity["nvidia.com/gpu"] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {KWOK_ANNOTATION: "fake"},
            },
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": KUBERNETES_VERSION,
                    "osImage": "kwok (hpcops.slinky lab)",
                },
            },
        }


# The label the Slinky operator puts on slurmd pods (its WorkerApp, 1.1 and 1.2 alike).
SLURMD_POD_LABEL = ("app.kubernetes.io/name", "slurmd")
KWOK_STAGES_FILE = "kwok-stages.yaml"


def pod_stages() -> list[dict[str, Any]]:
    """kwok's pod lifecycle for the lab, as kwok Stage objects: a pod bound to a kwok node
    runs at once, a Job's pod then succeeds, a deleted pod goes.

    A slurmd pod runs but is not Ready: where kwok would mark it Ready before slurmd has
    started, the Slinky operator deletes it as "healthy but not registered" (docs/lab.md)
    and a job that just started there is requeued. The pod runner marks it Ready when the
    real slurmd answers its readiness probe. kwok uses its own pod stages only when a
    configuration names none, so all of them are here. A deleted pod goes at once unless
    the pod runner runs it (its annotation): the runner deletes it once its program stopped."""
    slurmd_key, slurmd_value = SLURMD_POD_LABEL
    label = f'.metadata.labels["{slurmd_key}"]'
    live = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
    unstarted = {"key": ".status.podIP", "operator": "DoesNotExist"}
    run_by = f'.metadata.annotations["{pod_runner.RUN_BY_ANNOTATION}"]'

    def running(ready: str) -> str:
        # A Go template kwok renders into the pod's status.
        return "\n".join(
            [
                "{{ $now := Now }}",
                "phase: Running",
                "startTime: {{ $now | Quote }}",
                "hostIP: {{ NodeIPWith .spec.nodeName | Quote }}",
                "podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) "
                '( or .metadata.uid "" ) ( or .metadata.name "" ) '
                '( or .metadata.namespace "" ) | Quote }}',
                "conditions:",
                *(
                    f"- {{type: {kind}, status: {status!r}, "
                    "lastTransitionTime: {{ $now | Quote }}}"
                    for kind, status in (
                        ("Initialized", "True"),
                        ("PodScheduled", "True"),
                        ("ContainersReady", ready),
                        ("Ready", ready),
                    )
                ),
                "containerStatuses:",
                "{{ range .spec.containers }}",
                "- name: {{ .name | Quote }}",
                "  image: {{ .image | Quote }}",
                f"  ready: {ready.lower()}",
                "  started: true",
                "  restartCount: 0",
                "  state: {running: {startedAt: {{ $now | Quote }}}}",
                "{{ end }}",
                "initContainerStatuses:",
                "{{ range .spec.initContainers }}",
                "- name: {{ .name | Quote }}",
                "  image: {{ .image | Quote }}",
                "  ready: true",
                "  restartCount: 0",
                '  {{ if eq .restartPolicy "Always" }}',
                "  started: true",
                "  state: {running: {startedAt: {{ $now | Quote }}}}",
                "  {{ else }}",
                "  state: {terminated: {exitCode: 0, reason: Completed, "
                "startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}",
                "  {{ end }}",
                "{{ end }}",
            ]
        )

    def stage(name: str, selector: list[dict[str, Any]], next_: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {"matchExpressions": selector},
                "next": next_,
            },
        }

    return [
        stage(
            "pod-running",
            [live, unstarted, {"key": label, "operator": "NotIn", "values": [slurmd_value]}],
            {"statusTemplate": running("True")},
        ),
        stage(
            "slurmd-pod-running",
            [live, unstarted, {"key": label, "operator": "In", "values": [slurmd_value]}],
            {"statusTemplate": running("False")},
        ),
        stage(
            "job-pod-succeeded",
            [
                live,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
            ],
            {
                "statusTemplate": "\n".join(
                    [
                        "{{ $now := Now }}",
                        "phase: Succeeded",
                        "containerStatuses:",
                        "{{ range .spec.containers }}",
                        "- name: {{ .name | Quote }}",
                        "  image: {{ .image | Quote }}",
                        "  ready: false",
                        "  started: false",
                        "  restartCount: 0",
                        "  state: {terminated: {exitCode: 0, reason: Completed, "
                        "startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}",
                        "{{ end }}",
                    ]
                )
            },
        ),
        # The pods the pod runner runs are deleted by the runner once their programs have
        # stopped, as a kubelet deletes a pod once its containers have ended.
        stage(
            "pod-deleted",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": run_by, "operator": "DoesNotExist"},
            ],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]


NODES = (
    LabNode("int01", "interactive", cpus=32, memory_gib=256),
    LabNode("int02", "interactive", cpus=32, memory_gib=256),
    LabNode("gpu01", "interactive", cpus=64, memory_gib=512, gpus=4),
    LabNode("gpu02", "interactive", cpus=64, memory_gib=512, gpus=4),
    LabNode("hpc01", "slurm", cpus=64, memory_gib=512),
    LabNode("hpc02", "slurm", cpus=64, memory_gib=512),
    LabNode("burst01", "burst", cpus=64, memory_gib=512),
    LabNode("burst02", "burst", cpus=64, memory_gib=512),
    LabNode("svc01", "never-touch", cpus=16, memory_gib=64),
)


# --------------------------------------------------------------------------------------
# Files: certificates, tokens, kubeconfigs
# --------------------------------------------------------------------------------------


def openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise LabError("openssl is missing: run `apt-get install openssl` (as root)")
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def make_pki(pki: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1 signed by it, and a service-account key pair."""
    pki.mkdir(mode=0o700, parents=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl(
        "req", "-x509", *ec, "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
        "-subj", "/CN=hpcops-lab-ca", "-days", "3650",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    openssl(
        "req", "-new", *ec, "-keyout", str(pki / "serving.key"), "-out", str(pki / "serving.csr"),
        "-subj", "/CN=kube-apiserver",
    )  # fmt: skip
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    names.append("kubernetes.default.svc.cluster.local")
    san = ",".join([*(f"DNS:{n}" for n in names), f"IP:{HOST}", f"IP:{SERVICE_IP}"])
    (pki / "serving.ext").write_text(
        f"subjectAltName={san}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n"
    )
    openssl(
        "x509", "-req", "-in", str(pki / "serving.csr"), "-CA", str(pki / "ca.crt"),
        "-CAkey", str(pki / "ca.key"), "-set_serial", str(secrets.randbits(63)), "-days", "825",
        "-extfile", str(pki / "serving.ext"), "-out", str(pki / "serving.crt"),
    )  # fmt: skip
    openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-out", str(pki / "sa.key"),
    )  # fmt: skip
    openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def token_file(tokens: dict[str, str]) -> str:
    """The apiserver's --token-auth-file: token,user,uid[,"group,..."]."""
    lines = []
    for user, token in tokens.items():
        groups = TOKEN_USERS[user]
        lines.append(f'{token},{user},{user},"{groups}"' if groups else f"{token},{user},{user}")
    return "\n".join(lines) + "\n"


def kubeconfig(ca_path: Path, user: str, token: str) -> str:
    """A token kubeconfig for the lab's apiserver (JSON is valid kubeconfig YAML).

    The CA is embedded, so a copy of the file works anywhere on the host.
    """
    ca_data = base64.b64encode(ca_path.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hpcops-lab",
                "cluster": {
                    "server": f"https://{HOST}:{APISERVER_PORT}",
                    "certificate-authority-data": ca_data,
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "hpcops-lab", "context": {"cluster": "hpcops-lab", "user": user}}],
        "current-context": "hpcops-lab",
    }
    return json.dumps(config, indent=2) + "\n"


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def pid_runs(pid: int | None, exe: Path) -> bool:
    """Whether pid is a live process of exe (not a recycled pid of another program)."""
    if pid is None:
        return False
    running = pid_exe(pid)
    # A binary replaced while it runs shows as "<path> (deleted)".
    return running is not None and running.startswith(str(exe)) and not is_zombie(pid)


def component_exe(component: str) -> Path:
    """The executable a component's process runs (the pod runner is a Python script)."""
    if component == "pod-runner":
        return Path(os.path.realpath(sys.executable))
    return k8s_binaries.binary(component).path


def slinky_summary() -> str:
    """Which Slinky release the lab deploys, and where each release it builds comes from."""
    releases = "; ".join(
        f"{v} from {k8s_binaries.slinky_origin(v)}" for v in k8s_binaries.SLINKY_VERSIONS
    )
    return f"the lab deploys {k8s_binaries.LAB_SLINKY_VERSION} ({releases})"


def stray_pids() -> list[int]:
    """Processes of the lab's binaries that use the lab's runtime directory.

    Catches what state.json no longer knows about (a crashed `up`, a deleted state file);
    every command line of the lab, and of the pods the pod runner runs, names a file below
    RUN_DIR.
    """
    binaries = (
        *(str(component_exe(name)) for name in COMPONENTS),
        *(str(k8s_binaries.slinky_operator(v).path) for v in k8s_binaries.SLINKY_VERSIONS),
    )
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        exe = pid_exe(int(entry.name))
        if exe is None or not exe.startswith(binaries):
            continue
        with contextlib.suppress(OSError):
            if str(RUN_DIR).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """A process of ours that has not exited (pid_exe is None once it is gone)."""
    return pid_exe(pid) is not None and not is_zombie(pid)


class K8sLab(RunDirState):
    """The control plane and its kwok nodes; see the module docstring."""

    def __init__(self) -> None:
        self.run_dir = RUN_DIR
        self.url = f"https://{HOST}:{APISERVER_PORT}"
        self.kubeconfig_path = KUBECONFIG_PATH
        self.node_names = [node.name for node in NODES]
        self._connections = threading.local()  # each thread's kept-alive connection

    # ---- paths and state -------------------------------------------------------------

    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    @property
    def ca_path(self) -> Path:
        return self.pki / "ca.crt"

    def token(self, user: str = ADMIN_USER) -> str:
        """The static token of a lab user (TOKEN_USERS)."""
        tokens = self.load_state().get("tokens", {})
        if user not in tokens:
            raise LabError(
                f"the Kubernetes lab is not up (no token for {user} in {self.state_path})"
            )
        return str(tokens[user])

    # ---- API -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """Call the apiserver with the admin token (or the given one, "" for none).

        Returns (HTTP status, parsed JSON body or raw text). Each thread keeps its connection
        alive: a new TLS connection per request was 32 ms against 4 ms on a busy machine, and
        the tests and the pod runner make thousands.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {}
        bearer = self.token() if token is None else token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        if data is not None:
            headers["Content-Type"] = content_type
        for _attempt in range(2):
            connection, reused = self._connection(method, path, timeout)
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                status, raw = response.status, response.read()
            except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as err:
                # http.client.RemoteDisconnected is a ConnectionResetError.
                connection.close()
                self._connections.connection = None
                if reused:
                    continue  # closed while idle, or the apiserver restarted: once more, anew
                raise LabError(f"{method} {self.url}{path}: {err}") from None
            except (OSError, http.client.HTTPException) as err:  # refused, timed out, garbled
                connection.close()
                self._connections.connection = None
                raise LabError(f"{method} {self.url}{path}: {err}") from None
            if response.will_close:
                connection.close()
                self._connections.connection = None
            return status, json_or_text(raw)
        raise LabError(f"{method} {self.url}{path}: the connection closed twice")

    def _connection(
        self, method: str, path: str, timeout: float
    ) -> tuple[http.client.HTTPSConnection, bool]:
        """This thread's connection to the apiserver, and whether it served a request before.
        A new one checks the server with the CA as it is now (each fresh `up` makes one)."""
        local = self._connections
        connection = getattr(local, "connection", None)
        if connection is not None and local.pid == os.getpid():
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
                return connection, True
            return connection, False
        try:
            context = ssl.create_default_context(cafile=str(self.ca_path))
        except OSError as err:  # no CA file: the lab is not up
            raise LabError(f"{method} {self.url}{path}: {err}") from None
        connection = http.client.HTTPSConnection(
            HOST, APISERVER_PORT, timeout=timeout, context=context
        )
        local.connection, local.pid = connection, os.getpid()
        return connection, False

    def get(self, path: str) -> dict[str, Any]:
        """GET as admin: the body, or LabError unless HTTP 200."""
        status, body = self.request("GET", path)
        if status != 200 or not isinstance(body, dict):
            raise LabError(f"GET {path} answered {status}: {body}")
        return body

    def apply(self, path: str, manifest: dict[str, Any]) -> None:
        """POST manifest to the collection at path; an existing object is left as it is."""
        status, body = self.request("POST", path, manifest)
        if status not in (201, 409):
            raise LabError(f"POST {path} {manifest['metadata']['name']} answered {status}: {body}")

    def readyz(self) -> bool:
        try:
            status, _body = self.request("GET", "/readyz", timeout=5)
        except LabError:
            return False
        return status == 200

    def node_conditions(self) -> dict[str, dict[str, str]]:
        """For each node: condition type -> status."""
        return {
            node["metadata"]["name"]: {
                c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])
            }
            for node in self.get("/api/v1/nodes")["items"]
        }

    # ---- components ------------------------------------------------------------------

    def commands(self) -> dict[str, list[str]]:
        """The command line of every component, by component name."""
        binaries = {name: str(component_exe(name)) for name in COMPONENTS}
        run, pki = self.run_dir, self.pki
        serving = [
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
        ]
        return {
            "etcd": [
                binaries["etcd"],
                "--name=hpcops-lab",
                f"--data-dir={run / 'etcd'}",
                f"--listen-client-urls=http://{HOST}:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://{HOST}:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://{HOST}:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://{HOST}:{ETCD_PEER_PORT}",
                f"--initial-cluster=hpcops-lab=http://{HOST}:{ETCD_PEER_PORT}",
                # A throwaway test store: durability is not worth the fsync latency.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            "kube-apiserver": [
                binaries["kube-apiserver"],
                f"--etcd-servers=http://{HOST}:{ETCD_CLIENT_PORT}",
                f"--bind-address={HOST}",
                f"--advertise-address={HOST}",
                f"--secure-port={APISERVER_PORT}",
                *serving,
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={run / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # No kubelet-reachable endpoints to publish for the `kubernetes` Service.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
            ],
            "kube-controller-manager": [
                binaries["kube-controller-manager"],
                *self.component_kubeconfig_flags("kube-controller-manager"),
                "--leader-elect=false",
                f"--bind-address={HOST}",
                f"--secure-port={CONTROLLER_MANAGER_PORT}",
                *serving,
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                # Each controller acts as its own service account, as on kubeadm clusters.
                "--use-service-account-credentials=true",
                # kwok shares two cores with everything else and its heartbeats can lag for
                # minutes (a cold `make test` saw every node NotReady at once, past 180 s).
                # A node marked NotReady gets the unreachable NoExecute taint (the Slinky
                # operator deletes its slurmd pod) and its pods are marked not Ready, which
                # kwok never marks back, so a NodeSet stayed at 0 ready replicas. Real
                # kubelets do not starve so, and no test needs a node to go NotReady. (The
                # controller itself stays: it lifts the not-ready taint of new Nodes.)
                "--node-monitor-grace-period=3600s",
                "--profiling=false",
            ],
            "kube-scheduler": [
                binaries["kube-scheduler"],
                *self.component_kubeconfig_flags("kube-scheduler"),
                "--leader-elect=false",
                f"--bind-address={HOST}",
                f"--secure-port={SCHEDULER_PORT}",
                *serving,
                "--profiling=false",
            ],
            "kwok": [
                binaries["kwok"],
                f"--kubeconfig={run / 'kwok.kubeconfig'}",
                f"--config={run / KWOK_STAGES_FILE}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                f"--node-ip={HOST}",
                # Without it kwok serves health and metrics on 0.0.0.0.
                f"--server-address={HOST}:{KWOK_PORT}",
            ],
            "pod-runner": [binaries["pod-runner"], str(POD_RUNNER), f"--run-dir={run}"],
        }

    def component_kubeconfig_flags(self, component: str) -> list[str]:
        path = self.run_dir / f"{component}.kubeconfig"
        return [
            f"--kubeconfig={path}",
            f"--authentication-kubeconfig={path}",
            f"--authorization-kubeconfig={path}",
        ]

    def start(self, component: str) -> None:
        """Start one component in its own session, output to log/<component>.log."""
        cmd = self.load_state()["commands"][component]
        with self.log_path(component).open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env={
                    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(self.run_dir),
                    "LC_ALL": "C",
                    # The pod runner's Slurm pods live in this cache's chroot, where `down`
                    # looks for what to stop.
                    "HPCOPS_LAB_CACHE": str(CACHE_DIR),
                },
                start_new_session=True,
            )
        state = self.load_state()
        state["pids"][component] = proc.pid
        self.save_state(state)

    def restart(self, component: str, timeout_s: float = 60) -> None:
        """Stop one component and start it again, as a crash and its supervisor would;
        for kube-apiserver, until it is ready again."""
        pid = self.load_state().get("pids", {}).get(component)
        if pid:
            stop_pids([pid], running, STOP_GRACE_S)
        self.start(component)
        if component == "kube-apiserver":
            self.wait_for(component, self.readyz, timeout_s, f"{self.url}/readyz after a restart")

    def components_alive(self) -> dict[str, bool]:
        pids = self.load_state().get("pids", {})
        return {name: pid_runs(pids.get(name), component_exe(name)) for name in COMPONENTS}

    def require_running(self, component: str) -> None:
        if not self.components_alive()[component]:
            raise ComponentExited(f"{component} exited; see {self.log_path(component)}")

    # ---- up --------------------------------------------------------------------------

    @staticmethod
    def build(*, every_release: bool = False) -> None:
        """What `up` needs, built when missing: the binaries, the operator and charts of the
        Slinky release the lab deploys and the Slurm chroot; with every_release, also those of
        the older lines (the pod runner runs the operator a pod's image names): the upgrade
        test asks for them, and `k8s_lab.py up` unless --deployed-release-only. An older
        operator is a build of minutes that the other tests need not wait for."""
        k8s_binaries.ensure([*BINARY_COMPONENTS, *CLIENT_TOOLS])
        k8s_binaries.ensure_slinky(
            k8s_binaries.SLINKY_VERSIONS if every_release else [k8s_binaries.LAB_SLINKY_VERSION]
        )
        # Before the pod runner needs it for the first Slurm pod, which must not wait a minute.
        ensure_chroot(SLINKY_RELEASE)

    def up(self, *, every_release: bool = False) -> None:
        """Start the lab, or reuse it when it is already up, healthy and configured the same."""
        self.build(every_release=every_release)
        log(f"Slinky: {slinky_summary()}")
        if self.is_healthy() and self.load_state().get("commands") == self.commands():
            self.create_storage()  # a lab started before the lab had storage
            self.write_client_files()
            log(f"Kubernetes lab already up at {self.url}")
            return
        if self.load_state() or stray_pids():
            log("Kubernetes lab is partially up or its configuration changed: restarting it")
            self.down()
        for port in LAB_PORTS:
            port_free(HOST, port)
        started = time.monotonic()
        log(f"starting Kubernetes {KUBERNETES_VERSION} lab...")
        with undone_on_failure(lambda: self.down(quiet=True)):
            self.prepare_run_dir()
            self.start_control_plane()
            self.create_nodes()
            self.install_keda_crds()
            self.create_storage()
            self.wait_ready(NODES_DEADLINE_S)
        self.write_client_files()
        log(
            f"Kubernetes lab up in {time.monotonic() - started:.1f} s at {self.url}; "
            f"KUBECONFIG={self.kubeconfig_path}"
        )

    def prepare_run_dir(self) -> None:
        """Fresh runtime directory: certificates, tokens, kubeconfigs, state with commands."""
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        (self.run_dir / "log").mkdir(parents=True)
        (self.run_dir / "etcd").mkdir(mode=0o700)
        make_pki(self.pki)
        (self.run_dir / KWOK_STAGES_FILE).write_text(
            "".join(f"---\n{json.dumps(stage, indent=2)}\n" for stage in pod_stages())
        )
        tokens = {user: secrets.token_urlsafe(32) for user in TOKEN_USERS}
        write_private(self.run_dir / "tokens.csv", token_file(tokens))
        for component, user in COMPONENT_USERS.items():
            write_private(
                self.run_dir / f"{component}.kubeconfig",
                kubeconfig(self.ca_path, user, tokens[user]),
            )
        self.save_state(
            {
                "kubernetes_version": KUBERNETES_VERSION,
                "url": self.url,
                "kubeconfig": str(self.kubeconfig_path),
                "tokens": tokens,
                "commands": self.commands(),
                "pids": {},
            }
        )
        self.state_path.chmod(0o600)  # it holds the tokens

    def start_control_plane(self) -> None:
        self.start("etcd")
        self.wait_for("etcd", self.etcd_healthy, 30.0, f"etcd on {HOST}:{ETCD_CLIENT_PORT}")
        self.start("kube-apiserver")
        self.wait_for("kube-apiserver", self.readyz, READYZ_DEADLINE_S, f"{self.url}/readyz")
        for component in ("kube-controller-manager", "kube-scheduler", "kwok", "pod-runner"):
            self.start(component)

    def wait_for(
        self, component: str, probe: Callable[[], bool], timeout_s: float, what: str
    ) -> None:
        """Poll probe until it is true; LabError naming the log when the component dies or is late."""

        def check() -> bool:
            self.require_running(component)
            return probe()

        wait_until(check, timeout_s, f"{what}; see {self.log_path(component)}")

    def etcd_healthy(self) -> bool:
        url = f"http://{HOST}:{ETCD_CLIENT_PORT}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def create_nodes(self) -> None:
        for node in NODES:
            self.apply("/api/v1/nodes", node.manifest())

    def create_storage(self) -> None:
        """A default StorageClass with a few host directories as PersistentVolumes, so the
        slurm chart's slurmctld keeps its state (jobs, nodes) when its pod is recreated, as
        on a site; the kube-controller-manager binds the claims, the pod runner mounts them."""
        self.apply(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
            },
        )
        for index in range(PERSISTENT_VOLUMES):
            path = self.run_dir / "volumes" / f"pv{index}"
            path.mkdir(parents=True, exist_ok=True)
            self.apply(
                "/api/v1/persistentvolumes",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": f"lab-pv{index}"},
                    "spec": {
                        "storageClassName": STORAGE_CLASS,
                        "capacity": {"storage": "16Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "hostPath": {"path": str(path), "type": "Directory"},
                    },
                },
            )

    def install_keda_crds(self) -> None:
        """KEDA's CRDs, as on a site whose platform team runs KEDA already: the apiserver then
        checks our ScaledObjects against KEDA's own schema (nothing acts on them here)."""
        admin = self.run_dir / "admin.kubeconfig"
        write_private(admin, kubeconfig(self.ca_path, ADMIN_USER, self.token()))
        kubectl = k8s_binaries.binary("kubectl").path
        # Server-side: scaledjobs' schema is too large for the last-applied annotation.
        cmd = [str(kubectl), f"--kubeconfig={admin}", "apply", "--server-side"]
        for path in k8s_binaries.keda_crds():
            cmd += ["-f", str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LabError(f"applying KEDA's CRDs failed: {proc.stderr.strip()}")

    def wait_ready(self, timeout_s: float) -> None:
        """Until every lab node is Ready and the controllers made the default service account.
        A component that dies as it starts is started again once, as a supervisor would: kwok
        v0.7.0 sometimes dies of a race in its start-up (`concurrent map read and map write`
        in its CEL type registry), which took a warm `make test`'s whole lab phase."""
        restarted: set[str] = set()

        def ready() -> bool:
            for component, alive in self.components_alive().items():
                if alive:
                    continue
                if component in restarted:
                    self.require_running(component)  # raises ComponentExited
                log(f"{component} exited as it started; starting it again (see its log)")
                restarted.add(component)
                self.start(component)
            ready_nodes = {n for n, c in self.node_conditions().items() if c.get("Ready") == "True"}
            status, _body = self.request(
                "GET", "/api/v1/namespaces/default/serviceaccounts/default"
            )
            return ready_nodes >= set(self.node_names) and status == 200

        try:
            wait_until(ready, timeout_s, "Ready kwok nodes and the default service account")
        except ComponentExited:
            raise
        except LabError as err:
            conditions: dict[str, dict[str, str]] = {}
            with contextlib.suppress(LabError):
                conditions = self.node_conditions()
            not_ready = [n for n in self.node_names if conditions.get(n, {}).get("Ready") != "True"]
            raise LabError(
                f"{err} (not Ready: {not_ready or 'none'}); see {self.log_path('kwok')} and "
                f"the other logs in {self.run_dir / 'log'}"
            ) from None

    def write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        """A private kubeconfig for the lab's apiserver with a bearer token."""
        write_private(path, kubeconfig(self.ca_path, user, token))

    def write_client_files(self) -> None:
        """The admin kubeconfig, and <repo>/.lab/bin/kubectl and helm for `PATH=.lab/bin:$PATH`."""
        write_private(self.kubeconfig_path, kubeconfig(self.ca_path, ADMIN_USER, self.token()))
        CLIENT_BIN_DIR.mkdir(parents=True, exist_ok=True)
        for name in CLIENT_TOOLS:
            link = CLIENT_BIN_DIR / name
            link.unlink(missing_ok=True)
            link.symlink_to(k8s_binaries.binary(name).path)
        # inventories/lab installs the charts from here, as a site from its mirror: each Slinky
        # release's in slinky-<version>/; SLINKY_VERSION_FILE names the lab's release.
        shutil.rmtree(CHARTS_LINK_DIR, ignore_errors=True)
        packages = {"cert-manager.tgz": k8s_binaries.cert_manager_chart()}
        for version in k8s_binaries.SLINKY_VERSIONS:
            for name, package in k8s_binaries.slinky_charts(version).items():
                packages[f"slinky-{version.lstrip('v')}/{name}.tgz"] = package
        for relative, package in packages.items():
            link = CHARTS_LINK_DIR / relative
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(package)
        SLINKY_VERSION_FILE.write_text(k8s_binaries.LAB_SLINKY_VERSION.lstrip("v") + "\n")

    # ---- status ----------------------------------------------------------------------

    def is_healthy(self) -> bool:
        return all(self.components_alive().values()) and self.readyz()

    def status(self) -> dict[str, Any]:
        """Pids and their liveness, the URL, and node readiness and pools."""
        state = self.load_state()
        alive = self.components_alive()
        healthy = all(alive.values()) and self.readyz()
        nodes: dict[str, dict[str, str]] = {}
        if healthy:
            for node in self.get("/api/v1/nodes")["items"]:
                conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
                nodes[node["metadata"]["name"]] = {
                    "pool": node["metadata"].get("labels", {}).get(POOL_LABEL, "-"),
                    "ready": conditions.get("Ready", "Unknown"),
                }
        return {
            "kubernetes_version": KUBERNETES_VERSION,
            "slinky": {
                "lab_release": k8s_binaries.LAB_SLINKY_VERSION,
                "releases": {
                    v: k8s_binaries.slinky_origin(v) for v in k8s_binaries.SLINKY_VERSIONS
                },
            },
            "url": self.url,
            "kubeconfig": str(self.kubeconfig_path),
            "components": {
                name: {"pid": state.get("pids", {}).get(name), "alive": ok}
                for name, ok in alive.items()
            },
            "nodes": nodes,
            "healthy": healthy,
            "up": any(alive.values()),
        }

    # ---- down ------------------------------------------------------------------------

    def down(self, quiet: bool = False) -> None:
        """Stop every lab process by pid (kwok first, etcd last) and check none is left."""
        if not quiet:
            log("stopping Kubernetes lab...")
        pids = self.load_state().get("pids", {})
        for component in reversed(COMPONENTS):
            pid = pids.get(component)
            if pid_runs(pid, component_exe(component)):
                stop_pids([pid], running, STOP_GRACE_S)
        stop_pids(stray_pids(), running, STOP_GRACE_S)
        slinky = SlinkyCluster(self)
        slinky.down()  # what a killed pod runner left of the Slurm pods
        self.state_path.unlink(missing_ok=True)
        self.kubeconfig_path.unlink(missing_ok=True)  # its tokens die with the lab
        left = self.leftovers()
        if left:
            raise LabError(f"Kubernetes lab did not go down cleanly: {left}")

    def leftovers(self) -> dict[str, list[Any]]:
        """Lab processes still running, Slurm pod namespaces; empty when the lab is down."""
        found = SlinkyCluster(self).leftovers()
        pids = [pid for pid in stray_pids() if not is_zombie(pid)]
        return {**found, "lab processes": pids} if pids else found


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def cmd_up(lab: K8sLab, args: argparse.Namespace) -> int:
    lab.up(every_release=not args.deployed_release_only)
    return 0


def cmd_build(lab: K8sLab, args: argparse.Namespace) -> int:
    lab.build(every_release=not args.deployed_release_only)
    return 0


def cmd_down(lab: K8sLab, args: argparse.Namespace) -> int:
    lab.down()
    log("down: no lab process left")
    return 0


def cmd_status(lab: K8sLab, args: argparse.Namespace) -> int:
    report = lab.status()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_status(report)
    if report["healthy"]:
        return 0
    return EXIT_DEGRADED if report["up"] else EXIT_DOWN


def print_status(report: dict[str, Any]) -> None:
    print(f"Kubernetes {report['kubernetes_version']} lab: {health(report)}")
    if not report["up"]:
        return
    print(f"  API         {report['url']}  KUBECONFIG={report['kubeconfig']}")
    print(f"  Slinky      {slinky_summary()}")
    for name, component in report["components"].items():
        state = "alive" if component["alive"] else "DEAD"
        print(f"  {name:<24}pid {component['pid']!s:<8}{state}")
    for name, node in report["nodes"].items():
        ready = "Ready" if node["ready"] == "True" else "NotReady"
        print(f"  node {name:<8}{node['pool']:<13}{ready}")


def cmd_env(lab: K8sLab, args: argparse.Namespace) -> int:
    if not lab.load_state():
        log("the Kubernetes lab is not up")
        return EXIT_DOWN
    values = {
        "KUBECONFIG": str(lab.kubeconfig_path),
        "K8S_LAB_URL": lab.url,
        "K8S_LAB_CA": str(lab.ca_path),
        "K8S_LAB_VERSION": KUBERNETES_VERSION,
        "K8S_LAB_BIN": str(CLIENT_BIN_DIR),
    }
    print_env(values, args)
    if not args.json:
        print(f'export PATH="{CLIENT_BIN_DIR}:$PATH"')
    return 0


COMMANDS = {
    "build": cmd_build,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="A real Kubernetes control plane with kwok nodes for the hpcops.slinky tests."
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--json", action="store_true", help="status/env: print JSON")
    parser.add_argument(
        "--deployed-release-only",
        action="store_true",
        help="build, up: only the Slinky release the lab deploys (not the older line's)",
    )
    args = parser.parse_args(argv)
    return run_cli("k8s_lab", lambda: COMMANDS[args.command](K8sLab(), args))


if __name__ == "__main__":
    sys.exit(main())
