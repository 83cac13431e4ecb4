# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm pods of a Slinky cluster, run for real by the pod runner.

The Slinky operator turns the `slurm` chart's custom resources into a slurmctld
StatefulSet, a slurmrestd Deployment and one pod per Slurm node (NodeSet).  kwok marks
those pods Running; this module starts, for each, the real Debian forky daemon the pod's
image would run, from a chroot of its own (``$HPCOPS_LAB_CACHE/chroot/forky-slinky``), so
the configuration the operator generated from our values is read by real Slurm 26.05:

* a claim's volume is the directory of its bound PersistentVolume (k8s_lab.py makes them);
* every pod's volumes (ConfigMaps, Secrets, projected volumes) are written to
  ``<k8s run dir>/slinky/<pod uid>/volumes/<volume>`` and bind-mounted where the pod's
  container mounts them, in a private mount namespace, so pods never see each other's
  files; ``emptyDir`` volumes get a directory of their own;
* slurmctld, slurmdbd and slurmd pods get a network namespace on the bridge ``hplslinky``
  (``198.18.28.0/24``) and the pod's hostname, and ``/etc/hosts`` names every such pod
  and the Services that select it (``slurm-controller.slurm``, and by the bare name, as
  the namespace's DNS search path would), as cluster DNS would;
* slurmrestd runs in the host network namespace on ``127.0.0.1:6820``, where the
  operator (``DEBUG=1``) looks for it, with the slurmdbd API when slurm.conf has
  accounting;
* slurmdbd pods store into the lab's MariaDB (``SlinkyCluster.database``): mariadbd of
  the same chroot on the bridge's host address, outside the cluster as a site's external
  database is, started when a test first asks for it;
* slurmd gets the host's cgroup hierarchy, so jobs run in the cgroups cgroup.conf asks
  for; the runner removes what slurmd left there when the pod goes;
* when a ConfigMap or Secret changes, the runner rewrites the files, and for slurmctld
  runs ``scontrol reconfigure`` as the chart's ``reconfigure`` sidecar does; a pod's
  preStop hook runs before its daemon is stopped.

Slurm's own log files land in each pod's log volume (``volumes/slurm-logfile``); each pod's
``exec.json`` lets tests run commands inside it (``running_pod(...).exec(...)``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_lab import (
    CHROOT_ENV_PATH,
    RELEASES,
    REST_USER,
    LabRestOracle,
    chroot_path,
    ensure_chroot,
    lab_jwt,
    lab_leftovers,
    mariadbd_argv,
    remove_lab_network,
)
from toolbox import (
    LabError,
    Mount,
    add_bridge,
    add_netns_on_bridge,
    chroot_setup,
    chroot_user,
    in_chroot,
    logger,
    pids_in_chroot,
    sh,
    stop_pids,
    wait_until,
)

# The cluster's own chroot and bridge: `down` of the Slurm lab stops every process rooted
# in its chroot, so the Slinky cluster must not share one with it.
SLINKY_RELEASE = dataclasses.replace(
    RELEASES["26.05"],
    name="slinky",
    subnet="198.18.28",
    port_base=6800,
    in_test_matrix=False,
)
BRIDGE = SLINKY_RELEASE.prefix
log = logger("slinky-pods")
FIRST_POD_HOST = 10
# Looks at the chroot's processes when pods stop, until none is left in their namespaces.
RELEASE_SCANS = 5
# Where the operator, run with DEBUG=1, looks for slurmrestd.
REST_ADDRESS = "127.0.0.1:6820"
SLURM_IMAGES = ("slurmctld", "slurmdbd", "slurmrestd", "slurmd")
# The lab's database for slurmdbd pods: on the bridge's host address, which every pod's
# network namespace reaches.
DATABASE_PORT = 3306
DATABASE_NAME = "slurm_acct_db"
DATABASE_USER = "slurm"
# Where its data directory is mounted in mariadbd's private mount namespace.
DATABASE_DIR = "/var/lib/hpcops-lab-mariadb"


@dataclass(frozen=True)
class Database:
    """How slurmdbd reaches the lab's MariaDB: what a site gives for an external database."""

    host: str
    port: int
    name: str
    user: str
    password: str


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def remove_cgroups(name: str) -> None:
    """The cgroup v1 directories slurmd made for one node (cgroup/v1 names them slurm_<node>),
    deepest first; only empty ones can go, and after slurmd stopped they are."""
    for top in Path("/sys/fs/cgroup").glob(f"*/{name}"):
        for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir():
                with contextlib.suppress(OSError):
                    path.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def image_name(image: str) -> str:
    """'ghcr.io/slinkyproject/slurmctld:26.05-ubuntu24.04' -> 'slurmctld'."""
    repository = image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def image_tag(image: str) -> str:
    """'ghcr.io/slinkyproject/slurm-operator:1.2.1' -> '1.2.1' ('' without a tag)."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def scratch_dirs(workdir: Path) -> tuple[str, ...]:
    """/tmp and /run of one pod, created below its directory."""
    for sub, mode in (("tmp", 0o1777), ("run", 0o755)):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
        (workdir / sub).chmod(mode)
    return ("tmp", "run")


def main_container(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's container running one of the Slurm images, if any."""
    containers: list[dict[str, Any]] = pod["spec"].get("containers", [])
    for container in containers:
        if image_name(container.get("image", "")) in SLURM_IMAGES:
            return container
    return None


@dataclass
class SlurmPod:
    """How one Slurm pod runs: its command, namespaces and mounts (saved as exec.json)."""

    name: str  # namespace/name
    kind: str  # slurmctld, slurmrestd or slurmd
    argv: list[str]
    env: dict[str, str]
    root: Path
    mounts: list[Mount]
    workdir: Path
    netns: str | None
    address: str | None
    hostname: str
    ids: tuple[int, int] | None
    pre_stop: list[str] | None = None  # the container's preStop exec command
    volumes_digest: str = ""

    def preexec(self) -> Callable[[], None]:
        return chroot_setup(
            self.root,
            netns=self.netns,
            hostname=self.hostname if self.netns else None,
            ids=self.ids,
            mounts=self.mounts,
        )

    def save(self) -> None:
        fields = {**self.__dict__, "root": str(self.root), "workdir": str(self.workdir)}
        fields["mounts"] = [m.__dict__ for m in self.mounts]
        (self.workdir / "exec.json").write_text(json.dumps(fields, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> SlurmPod:
        fields = json.loads(path.read_text())
        fields["root"], fields["workdir"] = Path(fields["root"]), Path(fields["workdir"])
        fields["mounts"] = [Mount(**m) for m in fields["mounts"]]
        fields["ids"] = tuple(fields["ids"]) if fields["ids"] else None
        return cls(**fields)

    def exec(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """A command in the pod, as `kubectl exec` runs it (as root, without the cgroups)."""
        process = self.start_exec(*argv)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        return subprocess.CompletedProcess(list(argv), process.returncode, out, err)

    def start_exec(self, *argv: str) -> subprocess.Popen[str]:
        """exec's command, started: its output is read with communicate()."""
        mounts = [m for m in self.mounts if m.target != "/sys/fs/cgroup"]
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": CHROOT_ENV_PATH, "LC_ALL": "C", "HOME": "/tmp"},
            # The preexec makes system calls only: safe beside threads that take no lock
            # it needs (the pod runner's deleting threads, the tests').
            preexec_fn=chroot_setup(  # noqa: PLW1509
                self.root,
                netns=self.netns,
                hostname=self.hostname if self.netns else None,
                mounts=mounts,
            ),
        )


def running_pod(run_dir: Path, name: str) -> SlurmPod:
    """The Slurm pod `namespace/name` the pod runner runs now; LabError when none."""
    for path in sorted((run_dir / "slinky").glob("*/exec.json")):
        pod = SlurmPod.load(path)
        if pod.name == name:
            return pod
    raise LabError(f"the pod runner runs no Slurm pod {name}")


class SlinkyCluster:
    """The chroot, bridge, namespaces and files of the Slurm pods of one lab."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.root = chroot_path(SLINKY_RELEASE)
        self.dir = lab.run_dir / "slinky"
        self.hosts_path = self.dir / "hosts"
        self.addresses: dict[str, tuple[str, dict[str, str]]] = {}  # uid -> (ip, pod labels)

    # ---- set-up shared by all pods ---------------------------------------------------

    def prepare(self) -> None:
        """The chroot and the bridge; idempotent, called before the first Slurm pod."""
        ensure_chroot(SLINKY_RELEASE)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            add_bridge(BRIDGE, SLINKY_RELEASE.address(1))
        if not self.hosts_path.exists():
            self.write_hosts([])

    def database(self) -> Database:
        """The lab's MariaDB for slurmdbd pods, started when first asked for and kept until
        `down`: mariadbd of the chroot on the bridge's host address (with the settings Slurm's
        accounting guide asks for), its data below the cluster's directory, the database
        made and a user that may create and alter its tables, as a site's DBA would."""
        self.prepare()
        host = SLINKY_RELEASE.address(1)
        password_path = self.dir / "mariadb-password"
        if password_path.exists() and port_open(host, DATABASE_PORT):
            password = password_path.read_text()
            return Database(host, DATABASE_PORT, DATABASE_NAME, DATABASE_USER, password)
        data = self.dir / "mariadb"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        mysql = chroot_user(self.root, "mysql")
        os.chown(data, *mysql)
        mounts = [
            Mount(target=DATABASE_DIR, source=str(data)),
            # mariadb-install-db looks the host up, as the pods' own /etc/hosts names it.
            Mount(target="/etc/hosts", source=str(self.hosts_path), read_only=True),
        ]
        env = {"PATH": CHROOT_ENV_PATH, "LC_ALL": "C", "HOME": "/tmp"}
        # The callers run no threads, so a preexec function is safe.
        run_checked(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={DATABASE_DIR}",
                "--user=mysql",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            env=env,
            timeout=120,
            preexec_fn=chroot_setup(self.root, mounts=mounts),
        )
        log_path = self.lab.run_dir / "log" / "mariadbd.out"
        with log_path.open("ab") as out:
            subprocess.Popen(
                mariadbd_argv(DATABASE_DIR, host, DATABASE_PORT),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=chroot_setup(self.root, ids=mysql, mounts=mounts),  # noqa: PLW1509
            )
        wait_until(
            lambda: port_open(host, DATABASE_PORT),
            60.0,
            f"mariadbd to listen on {host}:{DATABASE_PORT}; see {log_path}",
        )
        password = secrets.token_urlsafe(24)
        run_checked(
            ["mariadb", "--no-defaults", f"--socket={DATABASE_DIR}/mariadbd.sock", "--user=root"],
            # Over stdin: a password in argv would show in the host's process list.
            input=(
                f"CREATE DATABASE {DATABASE_NAME};\n"
                f"CREATE USER '{DATABASE_USER}'@'{SLINKY_RELEASE.subnet}.%' "
                f"IDENTIFIED BY '{password}';\n"
                f"GRANT ALL ON {DATABASE_NAME}.* TO '{DATABASE_USER}'@'{SLINKY_RELEASE.subnet}.%';\n"
            ),
            env=env,
            timeout=60,
            preexec_fn=chroot_setup(self.root, mounts=mounts),
        )
        password_path.touch(mode=0o600)
        password_path.write_text(password)
        return Database(host, DATABASE_PORT, DATABASE_NAME, DATABASE_USER, password)

    def new_netns(self) -> tuple[str, str]:
        """A network namespace on the bridge for one pod: its name and address."""
        taken = {ip for ip, _labels in self.addresses.values()}
        host = next(h for h in range(FIRST_POD_HOST, 250) if SLINKY_RELEASE.address(h) not in taken)
        address = SLINKY_RELEASE.address(host)
        name = f"{BRIDGE}-{host}"
        if Path(f"/run/netns/{name}").exists():  # left by a runner that was killed
            sh("ip", "netns", "delete", name)
        if Path(f"/sys/class/net/{name}").exists():
            # The host end of a veth whose namespace a process still holds (release_pods
            # says which); the pair goes with it, or no pod could have this address again.
            log(f"deleting {name}, left by a stopped pod's namespace that is still in use")
            sh("ip", "link", "delete", name, check=False)
        add_netns_on_bridge(name, BRIDGE, address)
        return name, address

    def release_pods(self, pods: Sequence[tuple[str, SlurmPod]]) -> None:
        """After the pods' main processes stopped: what they left (slurmstepd, job processes),
        their namespaces and the cgroups slurmd made for them.  Their files stay for the logs.
        One look at the chroot's processes serves every pod that stopped at once (32 nodes
        reclaimed together made 32 scans of /proc, one after the other)."""
        namespaces: dict[int, SlurmPod] = {}
        for uid, pod in pods:
            self.addresses.pop(uid, None)
            (pod.workdir / "exec.json").unlink(missing_ok=True)  # no `exec` into a stopped pod
            with contextlib.suppress(OSError):
                if pod.netns:
                    namespaces[os.stat(f"/run/netns/{pod.netns}").st_ino] = pod
        if not namespaces:
            return

        # A process forked just before its parent was killed (slurmd starting a slurmstepd
        # when its Node is deleted) may appear after a look: look again until the
        # namespaces are empty, as a kubelet stops a pod's whole cgroup. One left behind
        # kept its namespace and the host end of its veth, and every pod given that address
        # afterwards failed to start (a cold run: no lend succeeded after that test).
        def left_behind() -> list[int]:
            return [pid for pid in pids_in_chroot(self.root) if netns_inode(pid) in namespaces]

        left = left_behind()
        for scan in range(RELEASE_SCANS):
            if not left:
                break
            stop_pids(left, in_chroot(self.root), grace_s=2.0 if scan == 0 else 0.5)
            left = left_behind()
        if left:
            names = sorted(pod.name for pod in namespaces.values())
            log(f"processes {left} stay in the namespaces of {names}")
        # One `ip` for every namespace (32 pods reclaimed together: 32 runs of it, 0.3 s).
        deletes = "".join(f"netns delete {pod.netns}\n" for pod in namespaces.values())
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input=deletes,
            capture_output=True,
            text=True,
            check=False,
        )
        for pod in namespaces.values():
            if pod.kind == "slurmd":
                remove_cgroups(f"slurm_{pod.hostname}")

    def down(self) -> None:
        """Stop every process in the chroot, delete the pods' namespaces, cgroups and bridge."""
        stop_pids(pids_in_chroot(self.root), in_chroot(self.root), grace_s=5.0)
        for path in sorted((self.dir).glob("*/exec.json")):
            pod = SlurmPod.load(path)
            if pod.kind == "slurmd":
                remove_cgroups(f"slurm_{pod.hostname}")
        remove_lab_network(SLINKY_RELEASE)

    def leftovers(self) -> dict[str, list[Any]]:
        return lab_leftovers(self.root, SLINKY_RELEASE)

    def write_hosts(self, services: list[dict[str, Any]]) -> None:
        """/etc/hosts for the pods: each pod by hostname and each Service selecting it."""
        lines = [Path("/etc/hosts").read_text().rstrip("\n"), "# hpcops lab: Slinky pods"]
        # By address, then hostname: slurmrestd's pods all listen on the host's loopback, and
        # during a rollout the old and the new one are both there.
        entries = sorted(self.addresses.values(), key=lambda e: (e[0], e[1]["__hostname"]))
        for address, labels in entries:
            names = [labels["__hostname"], *labels["__fqdn"].split()]
            for service in services:
                selector = service["spec"].get("selector") or {}
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    meta = service["metadata"]
                    names += [
                        meta["name"],
                        f"{meta['name']}.{meta['namespace']}",
                        f"{meta['name']}.{meta['namespace']}.svc.cluster.local",
                    ]
            lines.append(f"{address}\t{' '.join(dict.fromkeys(names))}")
        text = "\n".join(lines) + "\n"
        # In place: the pods bind-mount this very inode.
        if not self.hosts_path.exists() or self.hosts_path.read_text() != text:
            with self.hosts_path.open("w") as out:
                out.write(text)

    # ---- volumes ---------------------------------------------------------------------

    def object_data(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        """A ConfigMap's or Secret's data as bytes, None when it does not exist (yet)."""
        plural = "configmaps" if kind == "configMap" else "secrets"
        status, body = self.lab.request("GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise LabError(f"GET {plural}/{name} answered {status}")
        if kind == "configMap":
            return {k: v.encode() for k, v in (body.get("data") or {}).items()}
        return {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}

    def volume_contents(
        self, namespace: str, volume: dict[str, Any]
    ) -> tuple[dict[str, bytes], dict[str, int]] | None:
        """The files a configMap, secret or projected volume holds and the mode of each that
        the volume sets (its defaultMode or an item's mode), as a kubelet writes them:
        slurmdbd refuses a slurmdbd.conf others can read. None for other kinds of volume, and
        a LabError while a source it needs does not exist yet (the kubelet waits too)."""
        sources: list[tuple[str, dict[str, Any]]] = []
        kind_spec = next(
            (volume[k] for k in ("projected", "configMap", "secret") if k in volume), {}
        )
        default_mode = kind_spec.get("defaultMode")
        if "projected" in volume:
            for source in volume["projected"].get("sources", []):
                sources += list(source.items())
        elif "configMap" in volume:
            sources.append(("configMap", volume["configMap"]))
        elif "secret" in volume:
            sources.append(("secret", {**volume["secret"], "name": volume["secret"]["secretName"]}))
        else:
            return None
        files: dict[str, bytes] = {}
        modes: dict[str, int] = {}
        for kind, spec in sources:
            if kind not in ("configMap", "secret"):
                continue
            data = self.object_data(kind, namespace, spec["name"])
            if data is None:
                if spec.get("optional"):
                    continue
                raise LabError(f"{kind} {namespace}/{spec['name']} does not exist yet")
            items = spec.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] in data:
                    files[item["path"]] = data[item["key"]]
                    mode = item.get("mode", default_mode)
                    if mode is not None:
                        modes[item["path"]] = int(mode)
        return files, modes

    def materialize(self, pod: dict[str, Any], workdir: Path, owner: tuple[int, int]) -> str:
        """Write the pod's volumes below workdir/volumes; return a digest of their files."""
        namespace = pod["metadata"]["namespace"]
        digest = hashlib.sha256()
        for volume in pod["spec"].get("volumes", []):
            target = workdir / "volumes" / volume["name"]
            if "persistentVolumeClaim" in volume:
                # The bound PersistentVolume's directory, kept when the pod goes.
                claimed = self.claimed_path(namespace, volume["persistentVolumeClaim"]["claimName"])
                os.chown(claimed, *owner)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.is_symlink():
                    target.symlink_to(claimed)
                continue
            target.mkdir(parents=True, exist_ok=True)
            os.chown(target, *owner)
            contents = self.volume_contents(namespace, volume)
            if contents is None:
                continue  # emptyDir and friends: an empty directory of the pod's own
            files, modes = contents
            for rel, content in sorted(files.items()):
                digest.update(f"{volume['name']}/{rel}\0".encode() + content + b"\0")
                path = target / rel
                if path.exists() and path.read_bytes() == content:
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
                # Keys are for the daemon's user only (Slurm refuses readable keys).
                mode = modes.get(rel, 0o644)
                path.chmod(mode & 0o600 if rel.endswith(".key") else mode)
                os.chown(path, *owner)
        return digest.hexdigest()

    def claimed_path(self, namespace: str, claim: str) -> Path:
        """The host directory of the PersistentVolume bound to a claim; LabError (the pod
        waits, as a kubelet does) while it is not bound."""
        pvc = self.lab.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
        volume = pvc.get("spec", {}).get("volumeName")
        if not volume or pvc.get("status", {}).get("phase") != "Bound":
            raise LabError(f"claim {namespace}/{claim} is not bound yet")
        path = self.lab.get(f"/api/v1/persistentvolumes/{volume}")["spec"].get("hostPath", {})
        if not path.get("path"):
            raise LabError(f"PersistentVolume {volume} of {namespace}/{claim} has no hostPath")
        return Path(path["path"])

    def volume_mounts(self, container: dict[str, Any], workdir: Path) -> list[Mount]:
        mounts = []
        for mount in container.get("volumeMounts", []):
            mounts.append(
                Mount(
                    target=mount["mountPath"],
                    source=str(workdir / "volumes" / mount["name"]),
                    read_only=bool(mount.get("readOnly")),
                )
            )
        # Parents first: /run/slurmctld goes inside the pod's /run, not under it.
        return sorted(mounts, key=lambda m: m.target.count("/"))

    # ---- pods ------------------------------------------------------------------------

    def spec_for(self, pod: dict[str, Any]) -> SlurmPod | None:
        container = main_container(pod)
        if container is None:
            return None
        self.prepare()
        kind = image_name(container["image"])
        meta = pod["metadata"]
        workdir = self.dir / meta["uid"]
        slurm_ids = chroot_user(self.root, "slurm")
        owner = chroot_user(self.root, REST_USER) if kind == "slurmrestd" else slurm_ids
        digest = self.materialize(pod, workdir, owner)
        hostname = pod["spec"].get("hostname") or meta["name"]
        labels = meta.get("labels", {})
        base = [
            Mount(target="/proc", fstype="proc"),
            Mount(target="/sys", fstype="sysfs", read_only=True),
            # The container's own writable layer: a directory per pod, so `exec` sees it too.
            *(Mount(target=f"/{sub}", source=str(workdir / sub)) for sub in scratch_dirs(workdir)),
            Mount(target="/etc/hosts", source=str(self.hosts_path), read_only=True),
        ]
        env = {"PATH": CHROOT_ENV_PATH, "LC_ALL": "C", "HOME": "/tmp"}
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        netns = address = None
        ids: tuple[int, int] | None = None
        if kind == "slurmrestd":
            plugins = "openapi/slurmctld"
            if has_accounting(workdir / "volumes"):
                plugins += ",openapi/slurmdbd"
            argv = ["slurmrestd", "-a", "rest_auth/jwt", "-s", plugins, REST_ADDRESS]
            ids = owner
            # Its Service's names lead to the host's loopback, where it listens: what the lab
            # runs on the host network (slurm-bridge) reaches it by them, as through cluster DNS.
            self.addresses[meta["uid"]] = (
                REST_ADDRESS.split(":", maxsplit=1)[0],
                {**labels, "__hostname": hostname, "__fqdn": ""},
            )
        else:
            netns, address = self.new_netns()
            subdomain = pod["spec"].get("subdomain")
            fqdn = f"{hostname}.{subdomain}.{meta['namespace']}" if subdomain else ""
            self.addresses[meta["uid"]] = (
                address,
                {**labels, "__hostname": hostname, "__fqdn": fqdn},
            )
            if kind == "slurmctld":
                argv = ["slurmctld", "-D"]
            elif kind == "slurmdbd":
                argv = ["slurmdbd", "-D"]
                ids = slurm_ids  # the pod's runAsUser: slurmdbd never runs as root there
            else:
                # The image's entrypoint passes its arguments through a shell: the operator
                # quotes --conf's value ('Features=hpc Gres=...') for that shell.
                argv = ["slurmd", "-D", *shlex.split(" ".join(container.get("args", [])))]
                # slurmd puts each job in a cgroup below the host's own hierarchy.
                base.append(Mount(target="/sys/fs/cgroup", source="/sys/fs/cgroup", recursive=True))
        pod_spec = SlurmPod(
            name=f"{meta['namespace']}/{meta['name']}",
            kind=kind,
            argv=argv,
            env=env,
            root=self.root,
            mounts=[*base, *self.volume_mounts(container, workdir)],
            workdir=workdir,
            netns=netns,
            address=address,
            hostname=hostname,
            ids=ids,
            pre_stop=container.get("lifecycle", {})
            .get("preStop", {})
            .get("exec", {})
            .get("command"),
            volumes_digest=digest,
        )
        pod_spec.save()
        return pod_spec

    def refresh(self, pod: dict[str, Any], running: SlurmPod) -> bool:
        """Rewrite changed ConfigMap/Secret files; True when they changed."""
        owner = chroot_user(self.root, REST_USER if running.kind == "slurmrestd" else "slurm")
        digest = self.materialize(pod, running.workdir, owner)
        changed = digest != running.volumes_digest
        running.volumes_digest = digest
        return changed

    def services(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.lab.get("/api/v1/services")["items"]
        return items


def run_checked(argv: list[str], **kwargs: Any) -> None:
    """Run a command; a LabError with its output when it fails."""
    done = subprocess.run(argv, text=True, capture_output=True, check=False, **kwargs)
    if done.returncode != 0:
        raise LabError(f"{argv[0]} exited {done.returncode}: {done.stdout}{done.stderr}")


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def has_accounting(volumes: Path) -> bool:
    """Whether a slurm.conf among a pod's volumes stores accounting in slurmdbd."""
    return any(
        "accounting_storage/slurmdbd" in conf.read_text(errors="replace")
        for conf in volumes.glob("*/slurm.conf")
    )


def describe(pod: SlurmPod) -> str:
    where = f" in {pod.netns} ({pod.address})" if pod.netns else ""
    return f"{shlex.join(pod.argv)}{where}"


class SlinkyRest(LabRestOracle):
    """The deployed cluster's slurmrestd, with tokens signed by the key in its Secret."""

    url = f"http://{REST_ADDRESS}"
    api = "v0.0.44"  # what Slinky 1.x speaks

    def __init__(self, jwt_key: bytes) -> None:
        self.jwt_key = jwt_key

    @classmethod
    def of_cluster(cls, lab: Any, namespace: str = "slurm") -> SlinkyRest:
        """The slurmrestd of the cluster deployed in the Kubernetes lab `lab`."""
        secret = lab.get(f"/api/v1/namespaces/{namespace}/secrets/slurm-jwt-key")
        return cls(base64.b64decode(secret["data"]["jwt_hs256.key"]))

    def token(self, user: str = "root", lifespan: int = 600) -> str:
        return lab_jwt(self.jwt_key, user, lifespan)

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/slurm/{self.api}/{path}")
        if status != 200 or not isinstance(body, dict):
            raise LabError(f"GET {path} answered {status}: {body}")
        return body
