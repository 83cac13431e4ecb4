# SPDX-License-Identifier: GPL-3.0-or-later
"""Every image the kind scenarios run, built on this machine: no registry is reachable here.

Sources: Debian root filesystems (debootstrap from the host's mirror) and the lab's Go
module builds (``k8s_binaries.py``).  Nothing is pulled.  Each image is ``tar | docker
import``: one layer, its entrypoint and user set with ``--change``; a label records the
recipe it was built from, so ``build`` rebuilds only what changed.

* ``hpcops.local/k8s/*`` (kubeadm's ``imageRepository``): kube-apiserver,
  kube-controller-manager, kube-scheduler, kube-proxy (Kubernetes v1.36.2, the lab's
  builds), etcd 3.6.8, CoreDNS 1.14.2, and a pause of our own (``kind/pause.go``).  They
  are baked into the node image as archives and imported before the kubelet starts
  (``kind/hpcops-preload.service``).
* ``hpcops.local/kind-node:v1.36.2``: bookworm (its systemd 252 runs on this cgroup v1
  host; newer ones refuse) with Debian's containerd, runc and CNI plugins, and kind's own
  files, read from kind's Go module at build time (not kept in this repository).
* ``hpcops.local/slinky/{slurmctld,slurmd,slurmrestd,slurmdbd}:<slurm>-debian-forky``: Slurm 26.05
  from Debian forky, honouring what the Slinky operator expects of its images (users,
  paths, arguments: see ``kind/slurmd-entrypoint.sh``); 1.2.1 asks the same of them as 1.1
  (slurmd's arguments, probes and log sidecar; only its preStop hook no longer deletes the
  Slurm node).
* ``hpcops.local/slinky/slurm-operator:<release>``: the lab's operator build of its Slinky
  release (``k8s_binaries.LAB_SLINKY_VERSION``: 1.2.1 where the public sources are beside
  the checkout, else what the Go module proxy serves), and its admission webhook; and
  ``hpcops.local/library/busybox`` for the chart's log sidecars.
* ``hpcops.local/jetstack/cert-manager-*:v1.21.1`` from cert-manager's release sources
  (only where ``../shared/sources`` has them), ``hpcops.local/kedacore/*:2.20.2`` from
  KEDA's module, ``hpcops.local/prometheus-operator/*:v0.85.0`` from its module, and
  ``hpcops.local/prometheus/prometheus`` from Debian forky's package.
* ``hpcops.local/metallb/{controller,speaker}:v0.16.2`` from MetalLB's module (built against
  frr-k8s v0.0.26, the newest the proxy serves, with the one type of v0.0.27 it names; L2
  mode never uses it).
* ``hpcops.local/slinky/login:<slurm>-debian-forky``: the Slurm image with sackd, sshd and
  the directory client Debian forky has (nslcd; no SSSD), entrypoint ``kind/login-entrypoint.sh``;
  the directory sidecar of every Slurm pod runs from it too.  ``hpcops.local/library/slapd``:
  Debian forky's slapd as the site's directory (``kind/slapd-entrypoint.sh``).
* ``hpcops.local/mariadb-operator/mariadb-operator:25.10.2`` from its module, and
  ``hpcops.local/library/mariadb:<version>`` from Debian forky's mariadb-server with an
  entrypoint of our own (``kind/mariadb-entrypoint.sh``) that honours what the operator
  asks of MariaDB's image: slurmdbd's database, as Slinky's installation guide makes it.

CLI::

    python3 tests/lab/kind_images.py prepare                   # Go builds and root filesystems only
    python3 tests/lab/kind_images.py build [--only NAME ...]   # what is missing or stale
    python3 tests/lab/kind_images.py list                      # references; 1 if one is missing
    python3 tests/lab/kind_images.py push REGISTRY             # copy them to a site's mirror

Progress and times go to stderr; ``$HPCOPS_LAB_CACHE/kind`` keeps the root filesystems and
``build-times.json``.  Needs root and a running dockerd (``docker_engine.py up``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import k8s_binaries
import yaml
from docker_engine import DOCKER
from toolbox import CACHE_DIR as LAB_CACHE_DIR
from toolbox import (
    LabError,
    debian_mirror,
    file_lock,
    logger,
    proc_mounted,
    replace_tree,
    run_cli,
    run_logged,
    sh,
)
from toolbox import apt_install as apt_install_in
from toolbox import debootstrap as debootstrap_minbase

CACHE_DIR = LAB_CACHE_DIR / "kind"
ROOTS_DIR = CACHE_DIR / "roots"
LOG_DIR = CACHE_DIR / "logs"
BUILD_TIMES = CACHE_DIR / "build-times.json"
ASSETS = Path(__file__).with_name("kind")
RECIPE_LABEL = "io.hpcops.recipe"

REGISTRY = "hpcops.local"
KUBERNETES_REPOSITORY = f"{REGISTRY}/k8s"
KUBERNETES_VERSION = k8s_binaries.KUBERNETES_VERSION
# The tags kubeadm v1.36.2 asks for (cmd/kubeadm/app/constants).
ETCD_TAG = k8s_binaries.KUBEADM_ETCD_VERSION.lstrip("v") + "-0"
PAUSE_TAG = "3.10.2"
NODE_IMAGE = f"{REGISTRY}/kind-node:{KUBERNETES_VERSION}"
SLURM_REPOSITORY = f"{REGISTRY}/slinky"
SLURM_SUITE = "forky"
SLINKY_VERSION = k8s_binaries.LAB_SLINKY_VERSION.lstrip("v")
BUSYBOX_IMAGE = f"{REGISTRY}/library/busybox:1.38"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# What kind's base image installs (images/base/Dockerfile), less NFS, iSCSI and FUSE, plus
# the container runtime and CNI plugins it builds from source and Debian packages.
NODE_PACKAGES = [
    "systemd",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "pigz",
    "e2fsprogs",
    "bash",
    "ca-certificates",
    "curl",
    "jq",
    "procps",
    "containerd",
    "runc",
    "containernetworking-plugins",
    # Not in kind's image: Ansible's modules (the bare-metal preflight) need it on a node.
    "python3",
]
KUBE_PROXY_PACKAGES = ("iptables", "nftables", "conntrack")
SLURM_PACKAGES = [
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurm-client",
    "slurm-wlm-jwt-plugin",
    "slurmdbd",
    "slurm-wlm-mysql-plugin",
    "tini",
    "hostname",
    "procps",
    "gawk",
    "ca-certificates",
]
# Our own entrypoints (tests/lab/kind/), installed in /usr/local/bin.
SLURM_SCRIPTS = ("slurmd-entrypoint.sh", "hold-log-fifos.sh")
# The Slinky operator runs slurmctld as uid/gid 401 (SlurmUser=slurm); Debian's package would
# create `slurm` as 64030, so the user exists before the packages are installed.
SLURM_UID = 401
SLURMRESTD_UID = 65534  # nobody, as the operator runs slurmrestd
JOB_USERS = {"alice": 2001, "bob": 2002}
# kind's files, read from its module: (path in the module's images/base/files, mode).
KIND_FILES = {
    "usr/local/bin/entrypoint": 0o755,
    "usr/local/bin/clean-install": 0o755,
    "kind/bin/mount-product-files.sh": 0o755,
    "kind/bin/undo-mount-hacks.sh": 0o755,
    "kind/bin/create-kubelet-cgroup-v2.sh": 0o755,
    "etc/crictl.yaml": 0o644,
    "etc/default/kubelet": 0o644,
    "etc/sysctl.d/10-network-magic.conf": 0o644,
    "etc/sysctl.d/10-network-security.conf": 0o644,
    "etc/containerd/config.toml": 0o644,
    "etc/systemd/system/containerd.service": 0o644,
    "etc/systemd/system/kubelet.service": 0o644,
    "etc/systemd/system/kubelet.slice": 0o644,
    "etc/systemd/system/undo-mount-hacks.service": 0o644,
    "etc/systemd/system/kubelet.service.d/10-kubeadm.conf": 0o644,
    "etc/systemd/system/kubelet.service.d/11-kind.conf": 0o644,
}


log = logger("kind-images")


# --------------------------------------------------------------------------------------
# Root filesystems
# --------------------------------------------------------------------------------------


def debootstrap(suite: str, target: Path, log_path: Path, include: Sequence[str] = ()) -> None:
    known = Path(f"/usr/share/debootstrap/scripts/{suite}").exists()
    debootstrap_minbase(
        suite,
        target,
        log_path,
        mirror=debian_mirror(),
        script=None if known else "sid",  # the host's debootstrap predates forky
        include=include,
    )


def in_root(root: Path, log_path: Path, *cmd: str) -> None:
    run_logged(["chroot", str(root), *cmd], log_path)


def apt_install(root: Path, log_path: Path, packages: Sequence[str]) -> None:
    apt_install_in(root, log_path, packages)
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)


def install_scripts(root: Path, names: Sequence[str]) -> None:
    """Our entrypoints (tests/lab/kind/) into the root's /usr/local/bin."""
    for name in names:
        shutil.copyfile(ASSETS / name, root / "usr/local/bin" / name)
        (root / "usr/local/bin" / name).chmod(0o755)


@contextlib.contextmanager
def services_held(root: Path) -> Iterator[None]:
    """No package's service starts in the chroot while packages install (sshd's, nslcd's
    and slapd's postinst would try): Debian's policy-rc.d convention."""
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    try:
        yield
    finally:
        policy.unlink()


def cached_root(name: str, recipe: str, build: Callable[[Path, Path], None]) -> Path:
    """A root filesystem under ROOTS_DIR, rebuilt when its recipe string changes."""
    root = ROOTS_DIR / name
    stamp = ROOTS_DIR / f"{name}.recipe"
    if root.exists() and stamp.exists() and stamp.read_text() == recipe:
        return root
    ROOTS_DIR.mkdir(parents=True, exist_ok=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"root-{name}.log"
    log_path.unlink(missing_ok=True)
    log(f"  root filesystem {name} (log: {log_path})")
    replace_tree(root, lambda scratch: build(scratch, log_path))
    stamp.write_text(recipe)
    return root


def asset_digest(*names: str) -> str:
    """What the recipes record of our own files in tests/lab/kind/."""
    return hashlib.sha256(b"".join((ASSETS / name).read_bytes() for name in names)).hexdigest()[:12]


def root_recipe(root: Path) -> str:
    return (ROOTS_DIR / f"{root.name}.recipe").read_text()


def bookworm_base() -> Path:
    """bookworm minbase with the packet filter tools: kube-proxy's base and the node's."""

    def build(root: Path, log_path: Path) -> None:
        debootstrap("bookworm", root, log_path, KUBE_PROXY_PACKAGES)

    return cached_root("bookworm-base", f"1 {' '.join(KUBE_PROXY_PACKAGES)}", build)


def slurm_root() -> Path:
    def build(root: Path, log_path: Path) -> None:
        debootstrap(SLURM_SUITE, root, log_path)
        in_root(root, log_path, "groupadd", "--gid", str(SLURM_UID), "slurm")
        in_root(
            root, log_path, "useradd", "--uid", str(SLURM_UID), "--gid", str(SLURM_UID),
            "--system", "--no-create-home", "--home-dir", "/var/lib/slurm",
            "--shell", "/usr/sbin/nologin", "slurm",
        )  # fmt: skip
        apt_install(root, log_path, SLURM_PACKAGES)
        for user, uid in JOB_USERS.items():
            in_root(
                root, log_path, "useradd", "--user-group", "--create-home", "--uid", str(uid), user
            )
        for path in ("var/spool/slurmd", "var/spool/slurmctld", "run/slurm", "var/log/slurm"):
            (root / path).mkdir(parents=True, exist_ok=True)
        shutil.chown(root / "var/spool/slurmctld", SLURM_UID, SLURM_UID)
        install_scripts(root, SLURM_SCRIPTS)

    recipe = f"1 {' '.join(SLURM_PACKAGES)} {asset_digest(*SLURM_SCRIPTS)}"
    return cached_root(f"{SLURM_SUITE}-slurm", recipe, build)


# The login image adds to the Slurm image what Slinky's login image runs: sackd and sshd,
# and the directory's client (nslcd: forky has no SSSD), which every Slurm pod's directory
# sidecar runs from this image too.
LOGIN_PACKAGES = ["sackd", "openssh-server", "nslcd", "libnss-ldapd"]
LOGIN_SCRIPTS = ("login-entrypoint.sh",)


def login_root() -> Path:
    def build(root: Path, log_path: Path) -> None:
        subprocess.run(["cp", "-a", f"{slurm_root()}/.", str(root)], check=True)
        with proc_mounted(root), services_held(root):
            apt_install(root, log_path, LOGIN_PACKAGES)
        # An unprivileged container may not set the audit login uid: the session must
        # not fail on it, as in Slinky's login image.
        pam = root / "etc/pam.d/sshd"
        pam.write_text(
            pam.read_text().replace("session    required     pam_loginuid.so",
                                    "session    optional     pam_loginuid.so")
        )  # fmt: skip
        # Host keys come from the operator's Secret, never from the image.
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        install_scripts(root, LOGIN_SCRIPTS)

    recipe = (
        f"1 {root_recipe(slurm_root())} {' '.join(LOGIN_PACKAGES)} {asset_digest(*LOGIN_SCRIPTS)}"
    )
    return cached_root(f"{SLURM_SUITE}-login", recipe, build)


SLAPD_SUITE = "forky"
SLAPD_SCRIPTS = ("slapd-entrypoint.sh",)


def slapd_root() -> Path:
    """Debian's slapd, the site's directory in the kind scenarios."""

    def build(root: Path, log_path: Path) -> None:
        debootstrap(SLAPD_SUITE, root, log_path)
        with proc_mounted(root), services_held(root):
            apt_install(root, log_path, ["slapd", "ldap-utils", "tini"])
        # The package's own database (dc=nodomain) and online configuration are a host's:
        # the entrypoint writes its own.
        for path in ("var/lib/ldap", "etc/ldap/slapd.d"):
            shutil.rmtree(root / path, ignore_errors=True)
        install_scripts(root, SLAPD_SCRIPTS)

    recipe = f"1 slapd ldap-utils tini {asset_digest(*SLAPD_SCRIPTS)}"
    return cached_root(f"{SLAPD_SUITE}-slapd", recipe, build)


MARIADB_SUITE = "forky"
MARIADB_UID = 999  # what the mariadb-operator runs MariaDB as (its pods' securityContext)
MARIADB_SCRIPTS = ("mariadb-entrypoint.sh",)


def mariadb_root() -> Path:
    """Debian's mariadb-server laid out as MariaDB's own image: mysql is uid 999, the
    server reads /etc/mysql/conf.d (where the operator mounts the resource's myCnf) last,
    listens on every address of the pod, and runs mariadb-entrypoint.sh."""

    def build(root: Path, log_path: Path) -> None:
        debootstrap(MARIADB_SUITE, root, log_path)
        in_root(root, log_path, "groupadd", "--system", "--gid", str(MARIADB_UID), "mysql")
        in_root(
            root, log_path, "useradd", "--system", "--uid", str(MARIADB_UID),
            "--gid", str(MARIADB_UID), "--no-create-home", "--home-dir", "/var/lib/mysql",
            "--shell", "/usr/sbin/nologin", "mysql",
        )  # fmt: skip
        with proc_mounted(root):
            apt_install(root, log_path, ["mariadb-server", "tini"])
        # The data directory the package made (Debian's default, /var/lib/mariadb) and its
        # 127.0.0.1-only listener are for a host: the operator mounts the claim at
        # /var/lib/mysql, which the entrypoint names. Nor does an image need the manuals.
        for path in ("var/lib/mariadb", "var/lib/mysql", "usr/share/doc", "usr/share/man",
                     "usr/share/locale"):  # fmt: skip
            shutil.rmtree(root / path, ignore_errors=True)
        # my.cnf is an absolute link through /etc/alternatives: written through, it would
        # land on this host.
        my_cnf = root / "etc/mysql/my.cnf"
        my_cnf.unlink()
        my_cnf.write_text(
            "[client-server]\nsocket=/run/mysqld/mysqld.sock\n\n"
            "[mariadbd]\nbind-address=0.0.0.0\nskip-name-resolve\n\n"
            "!includedir /etc/mysql/mariadb.conf.d/\n!includedir /etc/mysql/conf.d/\n"
        )
        server_cnf = root / "etc/mysql/mariadb.conf.d/50-server.cnf"
        server_cnf.write_text(
            "".join(
                line
                for line in server_cnf.read_text().splitlines(keepends=True)
                if not line.startswith("bind-address")
            )
        )
        for path in ("var/lib/mysql", "run/mysqld"):
            (root / path).mkdir(parents=True, exist_ok=True)
            os.chown(root / path, MARIADB_UID, MARIADB_UID)
        install_scripts(root, MARIADB_SCRIPTS)

    recipe = f"3 mariadb-server tini {asset_digest(*MARIADB_SCRIPTS)}"
    return cached_root(f"{MARIADB_SUITE}-mariadb", recipe, build)


PROMETHEUS_SUITE = "forky"


def prometheus_root() -> Path:
    """Debian's Prometheus server (the ServiceMonitor path of KEDA's metrics in kind)."""

    def build(root: Path, log_path: Path) -> None:
        debootstrap(PROMETHEUS_SUITE, root, log_path)
        apt_install(root, log_path, ["prometheus"])

    return cached_root(f"{PROMETHEUS_SUITE}-prometheus", "1 prometheus", build)


def slurm_version(root: Path) -> str:
    """The Slurm version of the root's slurmctld package, e.g. 26.05.5."""
    return package_version(root, "slurmctld")


def package_version(root: Path, package: str) -> str:
    """The upstream version of a package installed in root, e.g. 3.5.3 (of 3.5.3+ds1-6)."""
    proc = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Version}", package],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout.split(":")[-1].split("+")[0].split("-")[0]


def kind_module() -> Path:
    return Path(
        k8s_binaries.go_mod_download(f"sigs.k8s.io/kind@{k8s_binaries.KIND_VERSION}")["Dir"]
    )


def node_root() -> Path:
    """bookworm with systemd, containerd and the kubelet, laid out as kind's base image."""

    def build(root: Path, log_path: Path) -> None:
        run_logged(["cp", "-a", f"{bookworm_base()}/.", str(root)], log_path)
        apt_install(root, log_path, NODE_PACKAGES)
        files = kind_module() / "images/base/files"
        for relative, mode in KIND_FILES.items():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files / relative, target)
            target.chmod(mode)
        configure_node(root, log_path)

    binaries = k8s_binaries.ensure(["kubelet", "kubeadm", "kubectl", "crictl"])
    recipe = "4 " + " ".join(NODE_PACKAGES) + " " + " ".join(str(p) for p in binaries.values())
    recipe += " " + asset_digest("hpcops-preload.service")

    def build_with_binaries(root: Path, log_path: Path) -> None:
        build(root, log_path)
        for name in ("kubelet", "kubeadm", "kubectl"):
            shutil.copyfile(binaries[name], root / "usr/bin" / name)
            (root / "usr/bin" / name).chmod(0o755)
        shutil.copyfile(binaries["crictl"], root / "usr/local/bin/crictl")
        (root / "usr/local/bin/crictl").chmod(0o755)

    return cached_root("bookworm-node", recipe, build_with_binaries)


def configure_node(root: Path, log_path: Path) -> None:
    """kind's base image steps (images/base/Dockerfile), adapted to Debian's runtime."""
    systemd = root / "lib/systemd/system"
    for path in (systemd / "sysinit.target.wants").glob("systemd-tmpfiles-setup.service"):
        path.unlink()
    for wants in ("multi-user", "local-fs", "basic"):
        for path in (systemd / f"{wants}.target.wants").glob("*"):
            path.unlink()
    for pattern in ("*udev*", "*initctl*"):
        for path in (systemd / "sockets.target.wants").glob(pattern):
            path.unlink()
    for path in (root / "etc/systemd/system").glob("*.wants/*"):
        path.unlink()
    with (root / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    init = root / "sbin/init"
    if init.exists() or init.is_symlink():
        init.unlink()
    init.symlink_to("/usr/lib/systemd/systemd")
    # kind's units run the runtime from /usr/local/bin and the CNI plugins from /opt/cni/bin.
    (root / "usr/local/bin/containerd").symlink_to("/usr/bin/containerd")
    (root / "opt/cni").mkdir(parents=True, exist_ok=True)
    (root / "opt/cni/bin").symlink_to("/usr/lib/cni")
    containerd_config(root / "etc/containerd/config.toml")
    spec = subprocess.run(
        ["chroot", str(root), "ctr", "oci", "spec"], capture_output=True, text=True, check=True
    ).stdout
    base = json.loads(spec)
    base.setdefault("hooks", {}).setdefault("createContainer", []).append(
        {"path": "/kind/bin/mount-product-files.sh"}
    )
    base["process"].pop("rlimits", None)
    (root / "etc/containerd/cri-base.json").write_text(json.dumps(base, indent=2) + "\n")
    shutil.copyfile(
        ASSETS / "hpcops-preload.service", root / "etc/systemd/system/hpcops-preload.service"
    )
    dropin = root / "etc/systemd/system/kubelet.service.d/20-hpcops-preload.conf"
    # The kubelet starts only once the images are in: kubeadm's static pods need them.
    dropin.write_text("[Unit]\nRequires=hpcops-preload.service\nAfter=hpcops-preload.service\n")
    for unit in (
        "kubelet.service",
        "containerd.service",
        "undo-mount-hacks.service",
        "hpcops-preload.service",
    ):
        in_root(root, log_path, "systemctl", "enable", unit)
    in_root(root, log_path, "systemctl", "mask", "systemd-binfmt.service")
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    (root / "kind").mkdir(exist_ok=True)
    (root / "kind/version").write_text(f"{KUBERNETES_VERSION}\n")


def containerd_config(path: Path) -> None:
    """kind's containerd configuration, changed where this machine or Debian need it."""
    text = path.read_text()
    # No FUSE here, and rootless kind is not what the scenarios run.
    start = text.index("[proxy_plugins]")
    end = text.index("[plugins.", start)
    text = text[:start] + text[end:]
    replacements = {
        # Lowering a sandbox's OOM score needs CAP_SYS_RESOURCE, which this host lacks.
        "restrict_oom_score_adj = false": "restrict_oom_score_adj = true",
        'sandbox_image = "registry.k8s.io/pause:3.10"': f'sandbox_image = "{KUBERNETES_REPOSITORY}/pause:{PAUSE_TAG}"',
    }
    for old, new in replacements.items():
        if old not in text:
            raise LabError(
                f"kind's containerd config no longer has {old!r}: update containerd_config()"
            )
        text = text.replace(old, new)
    path.write_text(text)


# --------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """One image: how to fill its root, and what `docker import` sets."""

    key: str
    ref: str
    fill: Callable[[Path], None]
    inputs: Callable[[], str]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = (PATH_ENV,)
    # Baked into the node image (the control plane's own images).
    preload: bool = False
    # Loaded on every node (what runs on the workers: slurmd, its log sidecar and its
    # directory-nss init container); the rest only on the services node, where the scenarios
    # pin every service (each worker is spared the import of each of them).
    every_node: bool = False
    # Also loaded on the bridge's nodes (the bridge's probe pod runs its scheduler's image).
    bridge_node: bool = False
    # Bump when the way an image is made changes in a way its inputs do not show.
    revision: int = 1

    def recipe(self) -> str:
        text = json.dumps(
            [self.revision, self.ref, self.inputs(), self.entrypoint, self.cmd, self.user, self.env]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh(DOCKER, *args, check=check)


def built_recipe(ref: str) -> str | None:
    proc = docker(
        "image", "inspect", "-f", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}', ref, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def docker_import(image: Image, root: Path, recipe: str, log_path: Path) -> None:
    changes = [f"LABEL {RECIPE_LABEL}={recipe}"]
    changes += [f"ENV {env}" for env in image.env]
    if image.entrypoint:
        changes.append(f"ENTRYPOINT {json.dumps(list(image.entrypoint))}")
    if image.cmd:
        changes.append(f"CMD {json.dumps(list(image.cmd))}")
    if image.user:
        changes.append(f"USER {image.user}")
    cmd = [DOCKER, "import"]
    for change in changes:
        cmd += ["--change", change]
    cmd += ["-", image.ref]
    with log_path.open("a") as out:
        tar = subprocess.Popen(
            # Reproducible (in name order, no access or change times, no process ID in the
            # names of pax headers): two images of one root are then one layer, which `kind
            # load` saves and each node imports once (the four Slurm daemons' images).
            ["tar", "--sort=name", "--numeric-owner", "--xattrs",
             "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
             "-C", str(root), "-c", "."],
            stdout=subprocess.PIPE, stderr=out,
        )  # fmt: skip
        code = subprocess.run(
            cmd, stdin=tar.stdout, stdout=out, stderr=subprocess.STDOUT, check=False
        ).returncode
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or code != 0:
            raise LabError(f"docker import of {image.ref} failed; see {log_path}")


def binary_root(*binaries: tuple[str, str]) -> Callable[[Path], None]:
    """A root with only static binaries: (name in k8s_binaries, path in the image)."""

    def fill(root: Path) -> None:
        for name, target in binaries:
            dest = root / target.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(k8s_binaries.ensure([name])[name], dest)
            dest.chmod(0o755)
        (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (root / "tmp").chmod(0o1777)
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc/passwd").write_text(
            "root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"
        )
        (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")

    return fill


@dataclass(frozen=True)
class BinaryInputs:
    """An image's inputs that are Go binaries of k8s_binaries: the recipe names their files."""

    names: tuple[str, ...]

    def __call__(self) -> str:
        return " ".join(str(k8s_binaries.binary(name).path) for name in self.names)

    def built(self) -> bool:
        return all(k8s_binaries.binary(name).path.is_file() for name in self.names)


def binary_inputs(*names: str) -> BinaryInputs:
    return BinaryInputs(names)


def next_to_build(images: Sequence[Image]) -> Image:
    """The first image whose Go binaries are built, else the first: on a cold machine the
    images of root filesystems (Slurm's, MariaDB's, slapd's, ready within minutes) are
    imported while the operators still compile, not in line after the last of them (4.4
    minutes of imports after the last Go build in a cold run of 2026-12-07)."""
    for image in images:
        if not isinstance(image.inputs, BinaryInputs) or image.inputs.built():
            return image
    return images[0]


def copy_root(
    source: Callable[[], Path], then: Callable[[Path], None] | None = None
) -> Callable[[Path], None]:
    def fill(root: Path) -> None:
        subprocess.run(["cp", "-a", f"{source()}/.", str(root)], check=True)
        if then:
            then(root)
        else:  # the copy's own time too, so that copies of one root make the same layer
            shutil.copystat(source(), root)

    return fill


def fill_pause(root: Path) -> None:
    with tempfile.TemporaryDirectory() as module:
        shutil.copyfile(ASSETS / "pause.go", Path(module, "main.go"))
        Path(module, "go.mod").write_text("module hpcops.io/lab/pause\n\ngo 1.22\n")
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(root / "pause"), "."],
            cwd=module, env=k8s_binaries.go_env(), check=True, capture_output=True,
        )  # fmt: skip


def fill_busybox(root: Path) -> None:
    """busybox-static from Debian, with a link for each applet."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    k8s_binaries.unpack_debian_package("busybox-static", root, LOG_DIR / "busybox.log")
    busybox = root / "usr/bin/busybox"
    applets = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=True
    ).stdout
    for applet in applets.split():
        link = root / "usr" / applet.removeprefix("usr/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to("/usr/bin/busybox")
    for merged in ("bin", "sbin"):
        (root / merged).symlink_to(f"usr/{merged}")
    (root / "tmp").mkdir(mode=0o1777, exist_ok=True)


def slurm_image(daemon: str, **kwargs: object) -> Image:
    """One Slurm daemon's image: the Slurm root (one layer, the same for every daemon), and
    the daemon's entrypoint and user."""
    return Image(
        key=daemon,
        ref=f"{SLURM_REPOSITORY}/{daemon}:{{slurm}}-debian-{SLURM_SUITE}",
        fill=copy_root(slurm_root),
        inputs=lambda: root_recipe(slurm_root()),
        revision=3,  # 3: the layer shared by the daemons' images
        **kwargs,  # type: ignore[arg-type]
    )


def catalogue() -> dict[str, Image]:
    k8s = KUBERNETES_REPOSITORY
    images = [
        Image("pause", f"{k8s}/pause:{PAUSE_TAG}", fill_pause,
              lambda: asset_digest("pause.go"),
              entrypoint=("/pause",), user="65535:65535", preload=True),
        *(
            Image(name, f"{k8s}/{name}:{KUBERNETES_VERSION}",
                  binary_root((name, f"/usr/local/bin/{name}")), binary_inputs(name), preload=True)
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        Image("kube-proxy", f"{k8s}/kube-proxy:{KUBERNETES_VERSION}",
              copy_root(bookworm_base, binary_root(("kube-proxy", "/usr/local/bin/kube-proxy"))),
              binary_inputs("kube-proxy"), preload=True),
        Image("etcd", f"{k8s}/etcd:{ETCD_TAG}",
              binary_root(("kubeadm-etcd", "/usr/local/bin/etcd")), binary_inputs("kubeadm-etcd"), preload=True),
        Image("coredns", f"{k8s}/coredns:{k8s_binaries.COREDNS_VERSION}",
              binary_root(("coredns", "/coredns")), binary_inputs("coredns"),
              entrypoint=("/coredns",), preload=True),
        Image("busybox", BUSYBOX_IMAGE, fill_busybox, lambda: f"busybox-static {k8s_binaries.ETCD_SUITE}",
              every_node=True),
        Image("slurm-operator", f"{SLURM_REPOSITORY}/slurm-operator:{SLINKY_VERSION}",
              binary_root(("slurm-operator", "/manager")), binary_inputs("slurm-operator"),
              entrypoint=("/manager",), user="65532:65532"),
        Image("slurm-operator-webhook", f"{SLURM_REPOSITORY}/slurm-operator-webhook:{SLINKY_VERSION}",
              binary_root(("slurm-operator-webhook", "/webhook")), binary_inputs("slurm-operator-webhook"),
              entrypoint=("/webhook",), user="65532:65532"),
        *addon_images(),
        slurm_image("slurmctld", entrypoint=("tini", "-g", "--", "/usr/local/bin/hold-log-fifos.sh", "slurmctld", "-D"), user=f"{SLURM_UID}:{SLURM_UID}"),
        slurm_image("slurmd", entrypoint=("tini", "-g", "--", "/usr/local/bin/slurmd-entrypoint.sh"),
                    every_node=True),
        slurm_image("slurmrestd", entrypoint=("tini", "-g", "--", "slurmrestd"), cmd=("0.0.0.0:6820",),
                    user=f"{SLURMRESTD_UID}:{SLURMRESTD_UID}"),
        slurm_image("slurmdbd", entrypoint=("tini", "-g", "--", "slurmdbd", "-D"), user=f"{SLURM_UID}:{SLURM_UID}"),
        # Also slurmd's directory-nss init container (the site's directory on every node).
        Image("login", f"{SLURM_REPOSITORY}/login:{{slurm}}-debian-{SLURM_SUITE}", copy_root(login_root),
              lambda: root_recipe(login_root()),
              entrypoint=("tini", "-g", "--", "/usr/local/bin/login-entrypoint.sh"), every_node=True),
        Image("slapd", f"{REGISTRY}/library/slapd:{{slapd}}", copy_root(slapd_root),
              lambda: root_recipe(slapd_root()),
              entrypoint=("tini", "-g", "--", "/usr/local/bin/slapd-entrypoint.sh")),
    ]  # fmt: skip
    node = Image(
        "kind-node",
        NODE_IMAGE,
        fill_node,
        lambda: (
            root_recipe(node_root())
            + " "
            + " ".join(f"{i.ref}={i.recipe()}" for i in images if i.preload)
        ),
        entrypoint=("/usr/local/bin/entrypoint", "/sbin/init"),
        env=(PATH_ENV, "container=docker"),
    )
    return {image.key: image for image in [*images, node]}


# What the charts of cert-manager and KEDA and the Prometheus operator's manifests name.
CERT_MANAGER_REPOSITORY = f"{REGISTRY}/jetstack"
CERT_MANAGER_ENTRYPOINTS = {  # as cert-manager's own images (hack/containers/Containerfile.*)
    "controller": "/app/cmd/controller/controller",
    "webhook": "/app/cmd/webhook/webhook",
    "cainjector": "/app/cmd/cainjector/cainjector",
    "startupapicheck": "/startupapicheck",
}
KEDA_REPOSITORY = f"{REGISTRY}/kedacore"
KEDA_COMMANDS = {  # the chart runs these paths as the containers' command
    "keda-operator": ("keda", "/keda"),
    "keda-metrics-apiserver": ("keda-metrics-apiserver", "/keda-adapter"),
    "keda-admission-webhooks": ("keda-admission-webhooks", "/keda-admission-webhooks"),
}
PROMETHEUS_OPERATOR_REPOSITORY = f"{REGISTRY}/prometheus-operator"
PROMETHEUS_IMAGE = f"{REGISTRY}/prometheus/prometheus:{{prometheus}}"
NONROOT = "65532:65532"
# The mariadb-operator's chart and its MariaDB resource name these, less the registry host.
MARIADB_OPERATOR_IMAGE = f"{REGISTRY}/mariadb-operator/mariadb-operator:{k8s_binaries.MARIADB_OPERATOR_VERSION.lstrip('v')}"
MARIADB_IMAGE = f"{REGISTRY}/library/mariadb:{{mariadb}}"
# MetalLB's chart runs /controller and /speaker, its images' entrypoints.
METALLB_IMAGES = {
    "metallb-controller": f"{REGISTRY}/metallb/controller:{k8s_binaries.METALLB_VERSION}",
    "metallb-speaker": f"{REGISTRY}/metallb/speaker:{k8s_binaries.METALLB_VERSION}",
}


def addon_images() -> list[Image]:
    """What site.yml installs beside Slinky: cert-manager (when its release sources are
    here) and KEDA; and the site's monitoring the autoscale scenario installs first: the
    Prometheus operator and Debian's Prometheus."""
    images = []
    if k8s_binaries.cert_manager_buildable():
        version = k8s_binaries.CERT_MANAGER_BUILD_VERSION
        for program, path in CERT_MANAGER_ENTRYPOINTS.items():
            name = f"cert-manager-{program}"
            images.append(Image(name, f"{CERT_MANAGER_REPOSITORY}/{name}:{version}",
                                binary_root((name, path)), binary_inputs(name),
                                entrypoint=(path,), user=NONROOT))  # fmt: skip
    if k8s_binaries.slurm_bridge_buildable():
        tag = k8s_binaries.SLURM_BRIDGE_VERSION.lstrip("v")
        for program in k8s_binaries.SLURM_BRIDGE_PROGRAMS:
            name = f"slurm-bridge-{program}"
            # As the bridge's own images (distroless static, nonroot, /<program>).
            # The role's probe pod runs the scheduler's image on a bridge node.
            images.append(Image(name, f"{SLURM_REPOSITORY}/{name}:{tag}",
                                binary_root((name, f"/{program}")), binary_inputs(name),
                                entrypoint=(f"/{program}",), user=NONROOT,
                                bridge_node=program == "scheduler"))  # fmt: skip
    keda_tag = k8s_binaries.KEDA_VERSION.lstrip("v")
    for name, (repository, path) in KEDA_COMMANDS.items():
        images.append(Image(name, f"{KEDA_REPOSITORY}/{repository}:{keda_tag}",
                            binary_root((name, path)), binary_inputs(name),
                            entrypoint=(path,), user=NONROOT))  # fmt: skip
    operator_tag = k8s_binaries.PROMETHEUS_OPERATOR_VERSION
    for name, path in (
        ("prometheus-operator", "/bin/operator"),
        ("prometheus-config-reloader", "/bin/prometheus-config-reloader"),
    ):
        images.append(Image(name, f"{PROMETHEUS_OPERATOR_REPOSITORY}/{name}:{operator_tag}",
                            binary_root((name, path)), binary_inputs(name),
                            entrypoint=(path,), user="65534:65534"))  # fmt: skip
    images.append(Image("mariadb-operator", MARIADB_OPERATOR_IMAGE,
                        binary_root(("mariadb-operator", "/bin/mariadb-operator")),
                        binary_inputs("mariadb-operator"),
                        entrypoint=("/bin/mariadb-operator",), user=NONROOT))  # fmt: skip
    for name, ref in METALLB_IMAGES.items():
        path = "/" + name.removeprefix("metallb-")
        # As MetalLB's images: the speaker runs as root (its raw sockets answer ARP). The
        # scenarios run the speaker on the services node alone (inventories/kind).
        user = "0:0" if name == "metallb-speaker" else NONROOT
        images.append(Image(name, ref, binary_root((name, path)), binary_inputs(name),
                            entrypoint=(path,), user=user))  # fmt: skip
    images.append(Image("mariadb", MARIADB_IMAGE, copy_root(mariadb_root),
                        lambda: root_recipe(mariadb_root()),
                        entrypoint=("tini", "-g", "--", "/usr/local/bin/mariadb-entrypoint.sh"),
                        user=f"{MARIADB_UID}:{MARIADB_UID}"))  # fmt: skip
    images.append(Image("prometheus", PROMETHEUS_IMAGE, fill_prometheus,
                        lambda: root_recipe(prometheus_root()),
                        entrypoint=("/bin/prometheus",), user="65534:65534", revision=2))  # fmt: skip
    return images


def fill_prometheus(root: Path) -> None:
    """Debian's server binary and the C library it links, nothing else of the Debian root
    (promtool alone is as large as the server)."""
    source = prometheus_root()
    binary_root()(root)
    for relative in ("usr/bin/prometheus", "usr/lib/x86_64-linux-gnu/libc.so.6",
                     "usr/lib64/ld-linux-x86-64.so.2"):  # fmt: skip
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, target, follow_symlinks=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "lib64").symlink_to("usr/lib64")
    (root / "prometheus").mkdir(mode=0o777)
    (root / "prometheus").chmod(0o777)


def resolve_ref(image: Image) -> str:
    if "{slurm}" in image.ref:
        return image.ref.format(slurm=slurm_version(slurm_root()))
    if "{mariadb}" in image.ref:
        return image.ref.format(mariadb=package_version(mariadb_root(), "mariadb-server"))
    if "{prometheus}" in image.ref:
        return image.ref.format(prometheus=package_version(prometheus_root(), "prometheus"))
    if "{slapd}" in image.ref:
        return image.ref.format(slapd=package_version(slapd_root(), "slapd"))
    return image.ref


def fill_node(root: Path) -> None:
    subprocess.run(["cp", "-a", f"{node_root()}/.", str(root)], check=True)
    archives = root / "kind/images"
    archives.mkdir(parents=True, exist_ok=True)
    for image in catalogue().values():
        if image.preload:
            ensure_image(image)
            target = archives / f"{image.key}.tar"
            docker("save", "-o", str(target), image.ref)


def ensure_image(image: Image) -> tuple[str, float | None]:
    """Build the image unless an image of the same recipe is there; (ref, seconds or None)."""
    # Timed from here: the recipe names the root filesystems, which are built on first use.
    started = time.monotonic()
    image = replace(image, ref=resolve_ref(image))
    recipe = image.recipe()
    if built_recipe(image.ref) == recipe:
        return image.ref, None
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{image.key}.log"
    log_path.unlink(missing_ok=True)
    log(f"building {image.ref} (log: {log_path})...")
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
        root = Path(scratch, "root")
        root.mkdir(mode=0o755)
        image.fill(root)
        docker_import(image, root, recipe, log_path)
    elapsed = time.monotonic() - started
    k8s_binaries.record_build_time(image.key, elapsed, BUILD_TIMES)
    log(f"built {image.ref} in {k8s_binaries.format_duration(elapsed)}")
    return image.ref, elapsed


REPO = Path(__file__).resolve().parents[2]
CHECKOUT_DIR = REPO / ".kind"


def stage_checkout(refs: dict[str, str]) -> Path:
    """What the kind inventory and molecule's create read, in <repo>/.kind (not committed).

    bin/ links kind, kubectl and helm; charts/ the Slinky charts packaged from the operator's
    tree (the release of the operator image), KEDA's and, when its sources are here,
    cert-manager's and slurm-bridge's (then cert-manager-version and
    slurm-bridge-version name their releases, and podgroup-crd.json is the PodGroup CRD of
    the scheduler-plugins module the bridge is built with); prometheus-operator/ the
    Prometheus operator's CRDs and RBAC, and monitoring.json its images and Prometheus';
    load-images.txt the images `kind load` puts on every node, load-images-services.txt those
    it puts on the services node alone, load-images-bridge.txt those it puts on the bridge's
    nodes too; slurm-image-tag the tag of the
    Slurm images, mariadb-image-tag that of MariaDB; slinky-version that release.
    """
    stage_binaries()
    charts = {**k8s_binaries.slinky_charts(), **addon_charts()}
    for sub in ("charts", "keda-crds", "prometheus-operator"):
        shutil.rmtree(CHECKOUT_DIR / sub, ignore_errors=True)
    for sub in ("charts", "prometheus-operator"):
        (CHECKOUT_DIR / sub).mkdir(parents=True)
    for name, target in charts.items():
        (CHECKOUT_DIR / "charts" / f"{name}.tgz").symlink_to(target)
    for path in k8s_binaries.prometheus_operator_manifests():
        target = CHECKOUT_DIR / "prometheus-operator" / f"{path.stem}.json"
        target.write_text(json.dumps(manifest_as_json(path)))
    cert_manager = CHECKOUT_DIR / "cert-manager-version"
    if "cert-manager" in charts:
        cert_manager.write_text(k8s_binaries.CERT_MANAGER_BUILD_VERSION + "\n")
    else:
        cert_manager.unlink(missing_ok=True)
        log(
            f"no cert-manager in kind: its release sources are not in {k8s_binaries.SHARED_SOURCES}"
        )
    bridge = CHECKOUT_DIR / "slurm-bridge-version"
    podgroup_crd = CHECKOUT_DIR / "podgroup-crd.json"
    if "slurm-bridge" in charts:
        bridge.write_text(k8s_binaries.SLURM_BRIDGE_VERSION.lstrip("v") + "\n")
        podgroup_crd.write_text(
            json.dumps(manifest_as_json(k8s_binaries.slurm_bridge_podgroup_crd()))
        )
    else:
        bridge.unlink(missing_ok=True)
        podgroup_crd.unlink(missing_ok=True)
        log(
            f"no slurm-bridge in kind: its release sources are not in {k8s_binaries.SHARED_SOURCES}"
        )
    monitoring = {
        "operator_image": refs["prometheus-operator"],
        "config_reloader_image": refs["prometheus-config-reloader"],
        "prometheus_image": refs["prometheus"],
        "prometheus_version": "v" + refs["prometheus"].rsplit(":", 1)[1],
    }
    (CHECKOUT_DIR / "monitoring.json").write_text(json.dumps(monitoring, indent=2) + "\n")
    catalogue_ = catalogue()
    load = [key for key in refs if key != "kind-node" and not catalogue_[key].preload]
    for name, keys in (
        ("load-images.txt", [key for key in load if catalogue_[key].every_node]),
        ("load-images-services.txt", [key for key in load if not catalogue_[key].every_node]),
        ("load-images-bridge.txt", [key for key in load if catalogue_[key].bridge_node]),
    ):
        (CHECKOUT_DIR / name).write_text("".join(f"{refs[key]}\n" for key in keys))
    (CHECKOUT_DIR / "slurm-image-tag").write_text(refs["slurmd"].rsplit(":", 1)[1])
    (CHECKOUT_DIR / "mariadb-image-tag").write_text(refs["mariadb"].rsplit(":", 1)[1])
    (CHECKOUT_DIR / "slapd-image").write_text(refs["slapd"])
    (CHECKOUT_DIR / "slinky-version").write_text(SLINKY_VERSION + "\n")
    log(
        f"kind runs Slinky {SLINKY_VERSION}, from {k8s_binaries.slinky_origin('v' + SLINKY_VERSION)}"
    )
    return CHECKOUT_DIR


def stage_binaries() -> Path:
    """bin/ of <repo>/.kind: kind, kubectl and helm, all that molecule's create and destroy
    run before the images the cluster loads (create builds those: `build` below)."""
    binaries = k8s_binaries.ensure(["kind", "kubectl", "helm"])
    shutil.rmtree(CHECKOUT_DIR / "bin", ignore_errors=True)
    (CHECKOUT_DIR / "bin").mkdir(parents=True)
    for name, target in binaries.items():
        (CHECKOUT_DIR / "bin" / name).symlink_to(target)
    return CHECKOUT_DIR / "bin"


class _ManifestLoader(yaml.SafeLoader):
    """YAML 1.1's `=` (the "value" type) read as the string it is in Kubernetes' YAML: the
    Prometheus operator's CRDs have `- =` in an enum, which PyYAML refuses."""


_ManifestLoader.add_constructor("tag:yaml.org,2002:value", _ManifestLoader.construct_yaml_str)


def manifest_as_json(path: Path) -> object:
    """One manifest, as JSON that kubernetes.core's YAML reader takes as it is."""
    return yaml.load(path.read_text(), Loader=_ManifestLoader)  # noqa: S506 - a SafeLoader


def addon_charts() -> dict[str, Path]:
    """KEDA's chart, the mariadb-operator's two, MetalLB's, and cert-manager's where its
    release sources are here."""
    charts = {"keda": k8s_binaries.keda_chart(), **k8s_binaries.mariadb_operator_charts()}
    charts["metallb"] = k8s_binaries.metallb_chart()
    if k8s_binaries.cert_manager_buildable():
        charts["cert-manager"] = k8s_binaries.cert_manager_local_chart()
    if k8s_binaries.slurm_bridge_buildable():
        charts["slurm-bridge"] = k8s_binaries.slurm_bridge_chart()
    return charts


# The Go builds behind the node image (on top of the lab's control plane) and kind itself:
# what molecule needs to make the cluster.
NODE_BINARIES = ("kubelet", "kubeadm", "kube-proxy", "kind", "crictl", "kubeadm-etcd", "coredns")


def prepare() -> float:
    """Everything that needs no dockerd: the Go builds and the root filesystems; seconds taken.

    `make test` runs this in the background while the lab tests run (see
    tests/integration/conftest.py), so only the `docker import`s are left for the kind test.
    Two paths at once, as they use different things: the Go builds take the CPU, the root
    filesystems (debootstrap and apt) mostly the network and the disk. The Go builds go in
    the order of what waits on them: the lab's binaries and operator (the Kubernetes tests),
    then the kind node's (molecule makes the cluster from the node image alone and builds
    the images it loads meanwhile: create_kind.yml), then the operators and the rest, then
    the older Slinky operator (the upgrade test, the last Kubernetes test). The roots that
    need no Go binary come first (node_prep's hosts among them), then the kind node's, which
    carries the kubelet. How much of the CPU this gets beside the tests is `make test`'s
    choice (tests/run_suite.py).
    """
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as background:
        roots = background.submit(prepare_roots)
        # The lab's own binaries first, one lock at a time: a lab test that needs them then
        # either finds them built or takes the lock between two builds, never waits on ours.
        # helm before them (the Slurm lane's mirror test waits on it from its first minutes),
        # then what `k8s_lab.py up` needs and the release the lab deploys.
        import k8s_lab  # noqa: PLC0415 - the lab's module is for this one call only

        k8s_binaries.ensure(["helm"])
        k8s_binaries.ensure([*k8s_lab.BINARY_COMPONENTS, *k8s_lab.CLIENT_TOOLS])
        k8s_binaries.ensure_slinky([k8s_binaries.LAB_SLINKY_VERSION])
        # What the Kubernetes tests of a cold `make test` wait for (its summary repeats it).
        log(
            f"the Kubernetes lab's binaries ready in {k8s_binaries.format_duration(time.monotonic() - started)}"
        )
        for name in NODE_BINARIES:
            k8s_binaries.ensure([name])
        # The node's root beside the next Go builds, after the other roots (one thread).
        node = background.submit(locked_node_root)
        for name in [n for n in k8s_binaries.BINARIES if n not in NODE_BINARIES]:
            k8s_binaries.ensure([name])
        addon_charts()
        k8s_binaries.prometheus_operator_manifests()
        roots.result()  # their errors, if any, are this one's
        node.result()
    # The older Slinky line last: its one user, the upgrade test, ends the Kubernetes tests
    # (tests/integration/conftest.py), well after kind's images are ready.
    k8s_binaries.ensure_slinky(k8s_binaries.SLINKY_VERSIONS)
    return time.monotonic() - started


def locked_node_root() -> Path:
    with build_lock():
        return node_root()


def prepare_roots() -> None:
    """The root filesystems that need no Go binary, then node_prep's Debian hosts."""
    started = time.monotonic()
    with build_lock():
        for root in (
            bookworm_base,
            slurm_root,
            login_root,
            slapd_root,
            mariadb_root,
            prometheus_root,
        ):
            root()
        # The Debian 12 and 13 hosts of the bare-metal preflight test; node_hosts builds on
        # this module, hence the late import.
        import node_hosts  # noqa: PLC0415

        for suite in node_hosts.SUITES:
            node_hosts.host_root(suite)
    log(
        f"root filesystems (but the kind node's) ready in {k8s_binaries.format_duration(time.monotonic() - started)}"
    )


def build_lock() -> contextlib.AbstractContextManager[None]:
    """One image build at a time per cache (make and pytest may both ask)."""
    return file_lock(CACHE_DIR)


def ensure(keys: Sequence[str] | None = None) -> dict[str, str]:
    """Build what is missing or stale; image key -> reference."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    images = catalogue()
    unknown = sorted(set(keys or ()) - set(images))
    if unknown:
        raise LabError(f"unknown images {unknown}; known: {', '.join(images)}")
    refs, timings = {}, {}
    with build_lock():
        waiting = [images[key] for key in keys or images]
        while waiting:
            image = next_to_build(waiting)
            waiting.remove(image)
            refs[image.key], took = ensure_image(image)
            if took is not None:
                timings[image.key] = took
    refs = {key: refs[key] for key in keys or images}  # in the order asked, as before
    if timings:
        summary = ", ".join(
            f"{key} {k8s_binaries.format_duration(s)}" for key, s in timings.items()
        )
        log(f"build times: {summary} (total {k8s_binaries.format_duration(sum(timings.values()))})")
    return refs


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """One command of the CLI; its exit code."""
    if args.command == "prepare":
        took = prepare()
        log(f"binaries and root filesystems ready in {k8s_binaries.format_duration(took)}")
        return 0
    if args.command == "build":
        refs = ensure(args.only)
        for key, ref in refs.items():
            print(f"{key:<24}{ref}")
        if args.only:
            stage_binaries()  # enough for molecule to make the cluster (create_kind.yml)
        else:
            log(
                f"staged the binaries, charts and image list for the kind inventory in {stage_checkout(refs)}"
            )
        return 0
    if args.command == "list":
        missing = 0
        times = k8s_binaries.load_build_times(BUILD_TIMES)
        for key, image in catalogue().items():
            # The Slurm tag comes from the root filesystem, which list never builds.
            built_root = (ROOTS_DIR / f"{SLURM_SUITE}-slurm").exists()
            ref = resolve_ref(image) if built_root or "{slurm}" not in image.ref else image.ref
            label = built_recipe(ref)
            state = "current" if label and label == replace(image, ref=ref).recipe() else "MISSING"
            missing += state != "current"
            took = f" (built in {k8s_binaries.format_duration(times[key])})" if key in times else ""
            print(f"{key:<24}{state:<9}{ref}{took}")
        return 1 if missing else 0
    if not args.registry:
        parser.error("push needs the registry")
    for key, ref in ensure().items():
        target = f"{args.registry}/{ref.split('/', 1)[1]}"
        docker("tag", ref, target)
        docker("push", target)
        print(f"{key:<24}{target}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Images of the kind scenarios, built here.")
    parser.add_argument("command", choices=("prepare", "build", "list", "push"))
    parser.add_argument("registry", nargs="?", help="push: the mirror, e.g. registry.site:5000")
    parser.add_argument("--only", action="append", help="build: just this image (repeatable)")
    args = parser.parse_args(argv)
    return run_cli("kind_images", lambda: run(args, parser))


if __name__ == "__main__":
    sys.exit(main())
