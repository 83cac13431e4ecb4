# SPDX-License-Identifier: GPL-3.0-or-later
"""Pinned builds of the Kubernetes lab's binaries, cached outside the repository.

Every binary lands in ``$HPCOPS_LAB_CACHE/bin/<name>-<version>`` (default cache
``/var/cache/hpcops-lab``) and is built only when that file is missing.  After each build
the binary must report its version (``--version`` or the command's equivalent) before it
replaces anything in the cache.

* ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` and ``kubectl``:
  ``k8s.io/kubernetes`` within one minor version of what the pinned Slinky operator uses, built
  through a generated wrapper module (``k8s.io/kubernetes`` replaces its staging modules
  with local paths, so it cannot be built or installed on its own).  The version is
  stamped with ``-ldflags -X`` as Kubernetes' own build does, so ``/version`` reports it.
* ``helm``: in the same wrapper module (its client-go is the lab's Kubernetes), so the
  packages both use are compiled once; so are cert-manager, slurm-operator v1.2.1 and
  slurm-bridge when their archives are here (``WRAPPED_RELEASES``).
* ``etcd``: the static binary of Debian forky's ``etcd-server`` package, downloaded with
  apt from a separate sources list and unpacked with ``dpkg -x`` (seconds, where a Go
  build takes minutes).
* ``kwok``: ``go install <package>@<version>``; ``pushgateway``: ``go build`` in its module.
* ``slurm-operator``: ``cmd/manager`` of ``github.com/SlinkyProject/slurm-operator``, one
  binary per Slinky release the lab can get (SLINKY_VERSIONS): from the Go module proxy, or
  from the release archives in ``../shared/sources`` (sha256 checked, SOURCE_ARCHIVES); its
  Helm charts and CRDs come from the same tree (``slinky_charts``).

All Go builds share one ``GOMODCACHE`` and ``GOCACHE`` under ``$HPCOPS_LAB_CACHE/go``.

CLI::

    python3 tests/lab/k8s_binaries.py build [--only NAME ...]   # build what is missing
    python3 tests/lab/k8s_binaries.py list                      # paths and versions; 1 if any is missing
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbox import (
    CACHE_DIR,
    LabError,
    debian_mirror,
    file_lock,
    logger,
    read_json,
    replace_tree,
    run_cli,
)

BIN_DIR = CACHE_DIR / "bin"
GO_DIR = CACHE_DIR / "go"
APT_DIR = CACHE_DIR / "apt-forky"
BUILD_LOG_DIR = BIN_DIR / "logs"
BUILD_TIMES = BIN_DIR / "build-times.json"

SLINKY_OPERATOR_MODULE = "github.com/SlinkyProject/slurm-operator"
SLURM_CLIENT_MODULE = "github.com/SlinkyProject/slurm-client"
# The newest release the Go module proxy serves here (v1.1.1 and later are refused, HTTP 403).
PROXY_SLINKY_VERSION = "v1.1.0"
# slurm-client v1.1.0 is refused by the proxy too; v1.0.1 has the same API versions
# (v0041 to v0044) and builds with operator v1.1.0 unchanged.
SLURM_CLIENT_FALLBACKS = {"v1.1.0": "v1.0.1"}
# Public release sources the proxy refuses, as `git archive`s of their tags, when this
# workplace provides them (never copied into the repository); outside it, a proxy that serves
# every release needs none of them.
SHARED_SOURCES = Path(
    os.environ.get(
        "HPCOPS_SHARED_SOURCES", Path(__file__).resolve().parents[3] / "shared" / "sources"
    )
)
SOURCES_DIR = CACHE_DIR / "sources"


@dataclass(frozen=True)
class SourceArchive:
    """One release tag's source as a `git archive` (<name>.tar.gz unpacking into <name>/)."""

    name: str
    module: str
    version: str
    commit: str
    sha256: str

    @property
    def path(self) -> Path:
        return SHARED_SOURCES / f"{self.name}.tar.gz"

    def present(self) -> bool:
        return self.path.is_file()

    def unpacked(self) -> Path:
        """The archive's tree in SOURCES_DIR, unpacked once after its sha256 was checked."""
        tree = SOURCES_DIR / self.name
        stamp = SOURCES_DIR / f"{self.name}.sha256"
        if tree.is_dir() and stamp.exists() and stamp.read_text().strip() == self.sha256:
            return tree
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        if digest != self.sha256:
            raise LabError(
                f"{self.path}: sha256 {digest}, expected {self.sha256} ({self.module} "
                f"{self.version}, commit {self.commit}); the file is not that release: remove it "
                "or replace it with the release's own archive"
            )
        SOURCES_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=SOURCES_DIR) as scratch:
            unpack_archive(self.path, Path(scratch))
            if not Path(scratch, self.name, "go.mod").exists():
                raise LabError(f"{self.path} does not unpack into {self.name}/ with a go.mod")
            shutil.rmtree(tree, ignore_errors=True)
            Path(scratch, self.name).rename(tree)
        stamp.write_text(self.sha256 + "\n")
        log(f"unpacked {self.path.name} (sha256 checked) into {tree}")
        return tree


def unpack_archive(archive: Path, into: Path) -> None:
    """Unpack a release archive, refusing members that would land outside `into`: Python's
    "data" filter where it has one (3.11.4 and later; Debian 12's 3.11.2 has not), GNU tar
    (which refuses ``..`` and absolute names) where not."""
    if hasattr(tarfile, "data_filter"):
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
        return
    proc = subprocess.run(
        ["tar", "-xf", str(archive), "-C", str(into), "--no-same-owner", "--no-same-permissions"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise LabError(f"tar could not unpack {archive}: {proc.stderr.strip()[:400]}")


# What ../shared/sources/README.md lists (tag, commit, sha256), by module and version.
SOURCE_ARCHIVES = {
    (archive.module, archive.version): archive
    for archive in (
        SourceArchive(
            "slurm-operator-v1.2.1",
            SLINKY_OPERATOR_MODULE,
            "v1.2.1",
            "87313dac23e95f5632439e99c9fe9e325ece1bcd",
            "d38fce907ada5c891e2feacfd1488e33bda5b8080c26747fea6046964b1077bf",
        ),
        SourceArchive(
            "cert-manager-v1.21.1",
            "github.com/cert-manager/cert-manager",
            "v1.21.1",
            "24e33194fb39488eff2bbf10c6dc640f407cad44",
            "2a2d2c069e6fc6157e12f00505b12e32a89636e8e1e983fed92d4e33467dee9d",
        ),
        SourceArchive(
            "vcert-v5.13.7",
            "github.com/Venafi/vcert/v5",
            "v5.13.7",
            "ee9b69160db74a0b502e02b12b6f4fd4ab4b8cbd",
            "a6df5fb9b9c20165d886f908859f9554f0a530352521d453fd421847b0e66aea",
        ),
        SourceArchive(
            "slurm-bridge-v1.2.1",
            "github.com/SlinkyProject/slurm-bridge",
            "v1.2.1",
            "a7d126e8fcd239e6a382c163cf4f1e36384cc741",
            "03f1bc9cbf5462fe10baad49e88e3ce990e43d04d8e792d9381e0efb8f84e94d",
        ),
        SourceArchive(
            "slurm-client-v1.2.1",
            SLURM_CLIENT_MODULE,
            "v1.2.1",
            "718b4eccd1f86b73ea90b6da7ea05a7782c02c83",
            "b1c6c3a11f56b554afb04eaebac4c5d229a147ab64162e3028a048443b1b27d8",
        ),
    )
}


def archived_slinky_versions() -> list[str]:
    """Operator releases whose source archive is here, oldest first."""
    return sorted(
        (
            version
            for (module, version), archive in SOURCE_ARCHIVES.items()
            if module == SLINKY_OPERATOR_MODULE and archive.present()
        ),
        key=version_key,
    )


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


# A release given by hand (a build from another tree, never in CI):
#   HPCOPS_LAB_SLINKY_VERSION=v1.2.2 HPCOPS_LAB_SLINKY_SOURCE=<its source tree>
#   HPCOPS_LAB_SLURM_CLIENT_SOURCE=<the slurm-client tree its go.mod names>
# With HPCOPS_LAB_SLINKY_VERSION alone, the release comes from an archive here or the proxy.
SLINKY_SOURCE_OVERRIDE = os.environ.get("HPCOPS_LAB_SLINKY_SOURCE", "")
SLURM_CLIENT_SOURCE_OVERRIDE = os.environ.get("HPCOPS_LAB_SLURM_CLIENT_SOURCE", "")
# The releases the lab builds, oldest first: the proxy's, the archived ones, the one asked for.
# The newest is the lab's release (what inventories/lab deploys); the older ones serve the
# tests of the older line and the upgrade test.
SLINKY_VERSIONS = sorted(
    {
        PROXY_SLINKY_VERSION,
        *archived_slinky_versions(),
        *filter(None, [os.environ.get("HPCOPS_LAB_SLINKY_VERSION", "")]),
    },
    key=version_key,
)
LAB_SLINKY_VERSION = os.environ.get("HPCOPS_LAB_SLINKY_VERSION") or SLINKY_VERSIONS[-1]


def slinky_origin(version: str) -> str:
    """Where the lab's build of an operator release comes from, for logs and test headers."""
    if SLINKY_SOURCE_OVERRIDE and version == LAB_SLINKY_VERSION:
        return f"source tree {SLINKY_SOURCE_OVERRIDE}"
    archive = SOURCE_ARCHIVES.get((SLINKY_OPERATOR_MODULE, version))
    if archive and archive.present():
        return f"{archive.path} (tag {version}, commit {archive.commit[:12]}, sha256 checked)"
    return "the Go module proxy"


# The Kubernetes of the operator's 1.x line (slurm-operator v1.2.1's go.mod); v1.1.0 is
# built against 1.35, within the one-minor client skew Kubernetes supports (checked at build).
KUBERNETES_VERSION = "v1.36.2"
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# The node side, for the kind node image (tests/lab/kind_images.py): same module, same flags.
KUBERNETES_NODE_COMMANDS = ("kubelet", "kubeadm", "kube-proxy")
# Kubernetes' own build tags: no SELinux cgo, no test-only code, no gRPC tracing.
KUBERNETES_BUILD_TAGS = "selinux,notest,grpcnotrace"
# v0.8 and later need an explicit stages configuration; v0.7 makes pods Running by default.
KWOK_VERSION = "v0.7.0"
# The helm whose client-go is the lab's Kubernetes (v0.36.2): it is built in the Kubernetes
# wrapper module, where 89 % of its packages (by source size) are Kubernetes' own and are
# compiled once for both (a cold helm alone took 3.6 min, first in line for the lab).
HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"
# Where scheduled handover runs push their metrics (a CronJob has no node_exporter).
PUSHGATEWAY_VERSION = "v1.11.1"
ETCD_SERIES = "3.5"
ETCD_PACKAGE = "etcd-server"
ETCD_SUITE = "forky"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


log = logger("k8s-binaries")


@dataclass(frozen=True)
class Binary:
    """One cached binary: how to build it and how to check what it says it is."""

    name: str
    version: str
    build: Callable[[Binary, Path], None]
    check_args: tuple[str, ...]
    expect: str
    # Minutes of a cold build on the 2-core lab host, measured in catalogue order (the
    # Kubernetes commands share most packages), for the progress line.
    cold_minutes: float
    # False: compiled without optimisations or inlining (UNOPTIMIZED_GCFLAGS), a quarter
    # less CPU to build (mariadb-operator: 230 -> 171 core-seconds, measured). For the
    # controllers and tools that wait on the apiserver far more than they compute, and kwok
    # (a few fake nodes: about 0.2 core-minutes of a whole `make test`); the control plane
    # and the kubelet, busy all through the tests, stay optimised, and so do the wrapped
    # releases' programs (WRAPPED_RELEASES), which reuse the packages Kubernetes compiled.
    optimized: bool = True
    # Appended to the cached file's name when the lab builds the release other than as
    # published (KEDA with the lab's scalers): a cache of the published build is not reused.
    variant: str = ""

    @property
    def path(self) -> Path:
        return BIN_DIR / f"{self.name}-{self.version}{self.variant}"

    @property
    def build_log(self) -> Path:
        return BUILD_LOG_DIR / f"{self.name}-{self.version}{self.variant}.log"


# --------------------------------------------------------------------------------------
# Go
# --------------------------------------------------------------------------------------


def go_env(**extra: str) -> dict[str, str]:
    """The environment of every Go command: the lab's shared caches, no cgo, the local Go."""
    return {
        **os.environ,
        "GOMODCACHE": str(GO_DIR / "mod"),
        "GOCACHE": str(GO_DIR / "build"),
        "GOPATH": str(GO_DIR / "path"),
        # Writable module cache, so `rm -rf $HPCOPS_LAB_CACHE` works; no DWARF from the
        # compiler (the link strips it anyway: -s -w): 7 % of a cold build (kwok, measured).
        "GOFLAGS": "-modcacherw -gcflags=all=-dwarf=false",
        # The compiler's garbage collector at a quarter of its default pace, for at most
        # 0.6 GB per compile: a cold k8s.io/api build took 43-53 s of user CPU against 55-65
        # s (interleaved, beside other work); a whole cold `make test`'s Go builds 53.0
        # core-minutes against 54.6 (runs of different load: less than it looked alone).
        "GOGC": os.environ.get("GOGC", "400"),
        # Never download another Go toolchain behind the user's back.
        "GOTOOLCHAIN": "local",
        # The one module the checksum database does not know (see MARIADB_OPERATOR_SUM).
        "GONOSUMDB": "github.com/mariadb-operator",
        "CGO_ENABLED": "0",
        **extra,
    }


def require_go() -> None:
    if shutil.which("go") is None:
        raise LabError("Go is missing: install Go 1.26 or newer and put `go` on PATH")


# The compiler flags of a binary built with optimized=False (the command line's -gcflags
# replaces GOFLAGS' one, which cannot hold a space).
UNOPTIMIZED_GCFLAGS = "-gcflags=all=-dwarf=false -N -l"
_unoptimized_build = False  # set by build_one while it builds such a binary


def run_logged(cmd: Sequence[str], log_path: Path, *, cwd: Path | None = None, **env: str) -> None:
    """Run a build command with its output appended to log_path; LabError naming the log."""
    if _unoptimized_build and list(cmd[:2]) in (["go", "build"], ["go", "install"]):
        cmd = [*cmd[:2], UNOPTIMIZED_GCFLAGS, *cmd[2:]]
    with log_path.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=go_env(**env), check=False
        ).returncode
    if code != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-5:]
        raise LabError(
            f"{' '.join(cmd[:3])}... failed ({code}); see {log_path}:\n  " + "\n  ".join(tail)
        )


def go_mod_download(module_at_version: str) -> dict[str, Any]:
    """`go mod download -json` of one module: its Dir, GoMod, Info, ... or LabError."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", module_at_version],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # outside any module, so no go.mod is consulted
        env=go_env(),
        check=False,
    )
    try:
        info: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        info = {"Error": proc.stderr.strip() or f"exit code {proc.returncode}"}
    if proc.returncode != 0 or "Error" in info:
        raise LabError(f"go mod download {module_at_version}: {info.get('Error')}")
    return info


def module_info(download: dict[str, Any]) -> dict[str, Any]:
    """The proxy's .info of a downloaded module (Version, Time and, if known, Origin)."""
    info: dict[str, Any] = json.loads(Path(download["Info"]).read_text())
    return info


def required_version(go_mod: str, module: str) -> str | None:
    """The version a go.mod requires of module, or None."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    return match.group(1) if match else None


def go_directive(go_mod: str) -> str:
    match = re.search(r"^go\s+(\S+)", go_mod, re.MULTILINE)
    if not match:
        raise LabError("go.mod without a go directive")
    return match.group(1)


def writable_copy(source: str | Path, tree: Path) -> None:
    """Copy a read-only tree (module cache, unpacked archive) to tree, writable, for the
    commands that write into it (go mod edit, go build -mod=mod, helm package)."""
    shutil.copytree(source, tree)
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)


def build_in_tree(
    binary: Binary,
    out: Path,
    tree: Path,
    package: str,
    replacements: Mapping[str, str | Path] | None = None,
    ldflags: str = "-s -w",
) -> None:
    """`go build` of package in a writable source tree (writable_copy), with modules replaced
    by local trees or other versions (`go mod edit -replace`): the builds of release sources
    the proxy refuses."""
    for module, replacement in (replacements or {}).items():
        run_logged(
            ["go", "mod", "edit", f"-replace={module}={replacement}"], binary.build_log, cwd=tree
        )
    go_build_in_tree(binary, out, tree, package, ldflags)


def go_install(binary: Binary, out: Path, package: str, ldflags: str = "-s -w") -> None:
    """`go install package@version` into a scratch GOBIN, then move the result to out."""
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as gobin:
        run_logged(
            ["go", "install", "-trimpath", "-ldflags", ldflags, f"{package}@{binary.version}"],
            binary.build_log,
            cwd=Path(gobin),
            GOBIN=gobin,
        )
        Path(gobin, package.rsplit("/", 1)[-1]).rename(out)


# --------------------------------------------------------------------------------------
# Slinky operator
# --------------------------------------------------------------------------------------


def slinky_operator_source(version: str = LAB_SLINKY_VERSION) -> Path:
    """The operator's tree at version (code, charts and CRDs): a source given by hand, an
    archive here (sha256 checked), or the Go module proxy's download."""
    if SLINKY_SOURCE_OVERRIDE and version == LAB_SLINKY_VERSION:
        return Path(SLINKY_SOURCE_OVERRIDE)
    archive = SOURCE_ARCHIVES.get((SLINKY_OPERATOR_MODULE, version))
    if archive and archive.present():
        return archive.unpacked()
    return Path(go_mod_download(f"{SLINKY_OPERATOR_MODULE}@{version}")["Dir"])


def slurm_client_replacement(wanted: str) -> str | None:
    """What replaces slurm-client `wanted` in the operator's go.mod, or None when the proxy
    serves it: a tree given by hand, an archive here, or a compatible served release."""
    try:
        go_mod_download(f"{SLURM_CLIENT_MODULE}@{wanted}")
        return None
    except LabError as refused:
        archive = SOURCE_ARCHIVES.get((SLURM_CLIENT_MODULE, wanted))
        if SLURM_CLIENT_SOURCE_OVERRIDE:
            replacement = SLURM_CLIENT_SOURCE_OVERRIDE
        elif archive and archive.present():
            replacement = str(archive.unpacked())
        elif wanted in SLURM_CLIENT_FALLBACKS:
            replacement = f"{SLURM_CLIENT_MODULE}@{SLURM_CLIENT_FALLBACKS[wanted]}"
        else:
            raise LabError(
                f"{refused}; no {SLURM_CLIENT_MODULE} {wanted} here either: put its archive in "
                f"{SHARED_SOURCES} or set HPCOPS_LAB_SLURM_CLIENT_SOURCE to its source tree"
            ) from None
        log(f"{refused}; building with {replacement}")
        return replacement


def minor_version(version: str) -> tuple[int, int]:
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def check_kubernetes_skew(version: str = LAB_SLINKY_VERSION) -> None:
    """LabError unless the operator's client libraries are within one minor of the lab's Kubernetes.

    Kubernetes supports clients one minor version older or newer than the apiserver.
    """
    go_mod = (slinky_operator_source(version) / "go.mod").read_text()
    wanted = required_version(go_mod, "k8s.io/kubernetes")
    if wanted is None:
        raise LabError(f"slurm-operator {version}'s go.mod requires no k8s.io/kubernetes")
    lab_major, lab_minor = minor_version(KUBERNETES_VERSION)
    op_major, op_minor = minor_version(wanted)
    if op_major != lab_major or abs(op_minor - lab_minor) > 1:
        raise LabError(
            f"slurm-operator {version} is built against Kubernetes {wanted}, "
            f"more than one minor version from the lab's {KUBERNETES_VERSION}: "
            f"update KUBERNETES_VERSION in {__file__}"
        )


# The operator's programs: the manager, and the admission webhook the chart runs beside it.
SLINKY_COMMANDS = {"slurm-operator": "./cmd/manager", "slurm-operator-webhook": "./cmd/webhook"}


def build_slinky_operator(binary: Binary, out: Path) -> None:
    """One program of the operator's tree at binary.version (SLINKY_COMMANDS): in the
    wrapper module when it is a wrapped release, else in a scratch copy of it (the module cache and the unpacked archives are never modified), with the
    slurm-client its go.mod names or the replacement slurm_client_replacement finds."""
    log(f"slurm-operator {binary.version} from {slinky_origin(binary.version)}")
    command = SLINKY_COMMANDS[binary.name]
    if wrapped(SLINKY_OPERATOR_MODULE, binary.version):
        package = f"{SLINKY_OPERATOR_MODULE}/{command.removeprefix('./')}"
        build_in_wrapper(binary, out, package, "-s -w")
        return
    source = slinky_operator_source(binary.version)
    wanted = required_version((source / "go.mod").read_text(), SLURM_CLIENT_MODULE)
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as scratch:
        tree = Path(scratch, "slurm-operator")
        writable_copy(source, tree)
        replacement = slurm_client_replacement(wanted) if wanted else None
        build_in_tree(
            binary,
            out,
            tree,
            command,
            {SLURM_CLIENT_MODULE: replacement} if replacement else None,
        )


SLINKY_CHARTS = ("slurm-operator-crds", "slurm-operator", "slurm")
# Go module zips leave out every folder named "vendor", so the slurm chart arrives without
# templates/vendor/nvidia/dcgm/_helpers.tpl and fails to render.  The lab defines those named
# templates with DCGM job mapping off (a real site installs the complete chart from OCI).
VENDOR_TEMPLATES = """{{/* Added by hpcops.slinky's lab: the Go module zip drops templates/vendor/. */}}
{{- define "vendor.dcgm.enabled" -}}
{{- if ((((.Values).vendor).nvidia).dcgm).enabled -}}
{{- fail "vendor.nvidia.dcgm needs the complete slurm chart: the lab's copy from the Go module has no templates/vendor/" -}}
{{- end -}}
{{- end -}}
{{- define "vendor.dcgm.nodesetHasGPU" -}}{{- end -}}
{{- define "vendor.dcgm.jobMappingDir" -}}/var/lib/dcgm-exporter/job-mapping{{- end -}}
{{- define "vendor.dcgm.prologName" -}}dcgm.sh{{- end -}}
{{- define "vendor.dcgm.epilogName" -}}dcgm.sh{{- end -}}
"""


def restore_vendor_templates(chart: Path) -> None:
    vendor = chart / "templates" / "vendor"
    if not vendor.exists():
        (chart / "templates" / "_hpcops_lab_vendor.tpl").write_text(VENDOR_TEMPLATES)


CHARTS_DIR = CACHE_DIR / "charts"


def slinky_charts(version: str = LAB_SLINKY_VERSION) -> dict[str, Path]:
    """The Slinky charts of the operator's tree at version, packaged as a mirror would hold
    them, so that operator, CRDs and charts are one release.

    The tree holds chart folders; slurm-operator depends on slurm-operator-crds through a
    file:// repository, which `helm dependency build` resolves offline.  Returns chart name
    -> .tgz path in $HPCOPS_LAB_CACHE/charts/slinky-<version>/, packaged once.
    """
    source = version
    version = version.lstrip("v")
    out_dir = CHARTS_DIR / f"slinky-{version}"
    packages = {name: out_dir / f"{name}-{version}.tgz" for name in SLINKY_CHARTS}
    if all(path.exists() for path in packages.values()):
        return packages
    helm = str(ensure(["helm"])["helm"])
    CHARTS_DIR.mkdir(parents=True, exist_ok=True)
    log_path = BUILD_LOG_DIR / f"slinky-charts-{version}.log"
    with tempfile.TemporaryDirectory(dir=CHARTS_DIR) as scratch:
        tree = Path(scratch, "helm")
        writable_copy(slinky_operator_source(source) / "helm", tree)
        restore_vendor_templates(tree / "slurm")
        staged = Path(scratch, "packages")
        staged.mkdir()
        for name in SLINKY_CHARTS:
            if (tree / name / "Chart.lock").exists():
                run_logged([helm, "dependency", "build", str(tree / name)], log_path)
            run_logged([helm, "package", str(tree / name), "--destination", str(staged)], log_path)
        missing = [path.name for path in packages.values() if not (staged / path.name).exists()]
        if missing:
            raise LabError(f"helm package did not write {missing}; see {log_path}")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staged.rename(out_dir)
    log(f"packaged the Slinky {version} charts in {out_dir}")
    return packages


# cert-manager's chart and KEDA's CRDs live in their Go modules too: the lab installs the
# cert-manager chart (values checked against its values.schema.json) and KEDA's CRDs (so
# the apiserver checks our ScaledObjects against KEDA's schema).  Same versions as the roles.
CERT_MANAGER_MODULE = "github.com/cert-manager/cert-manager"
CERT_MANAGER_VERSION = "v1.21.2"
KEDA_MODULE = "github.com/kedacore/keda/v2"
KEDA_VERSION = "v2.20.2"
KEDA_CRDS = (
    "scaledobjects",
    "scaledjobs",
    "triggerauthentications",
    "clustertriggerauthentications",
)


def cert_manager_chart() -> Path:
    """cert-manager's chart at CERT_MANAGER_VERSION, packaged as its release tool does.

    In the repository (and so in the module) Chart.yaml says v0.0.0; the release sets the
    version and appVersion (the image tag) when it packages the chart.
    """
    source = Path(go_mod_download(f"{CERT_MANAGER_MODULE}@{CERT_MANAGER_VERSION}")["Dir"])
    return package_chart(
        source / "deploy/charts/cert-manager",
        f"cert-manager-{CERT_MANAGER_VERSION}",
        ["--version", CERT_MANAGER_VERSION, "--app-version", CERT_MANAGER_VERSION],
    )


def keda_crds() -> list[Path]:
    """KEDA's CRD manifests (keda.sh group) at KEDA_VERSION, from its module."""
    source = Path(go_mod_download(f"{KEDA_MODULE}@{KEDA_VERSION}")["Dir"])
    paths = [source / f"config/crd/bases/keda.sh_{plural}.yaml" for plural in KEDA_CRDS]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise LabError(f"KEDA {KEDA_VERSION} module has no {missing}")
    return paths


# --------------------------------------------------------------------------------------
# What site.yml installs beside Slinky, run for real in kind: cert-manager, KEDA, and the
# Prometheus operator (the ServiceMonitor path of KEDA's metrics)
# --------------------------------------------------------------------------------------

# The proxy refuses cert-manager's programs (nested modules) and vcert, so they come only
# from the release archives in SHARED_SOURCES; without them kind runs without cert-manager.
CERT_MANAGER_BUILD_VERSION = "v1.21.1"
VCERT_MODULE = "github.com/Venafi/vcert/v5"
# The programs the chart runs (acmesolver only answers ACME HTTP-01 challenges: not needed).
CERT_MANAGER_COMMANDS = ("controller", "webhook", "cainjector", "startupapicheck")


def cert_manager_archive() -> SourceArchive:
    return SOURCE_ARCHIVES[(CERT_MANAGER_MODULE, CERT_MANAGER_BUILD_VERSION)]


def cert_manager_buildable() -> bool:
    return cert_manager_archive().present() and SOURCE_ARCHIVES[(VCERT_MODULE, "v5.13.7")].present()


def build_cert_manager(binary: Binary, out: Path) -> None:
    """cmd/<program> of the archived tree, as cert-manager's make/server.mk builds it: each
    program is a module replacing the root with ../../; the controller's vcert comes from
    its archive too."""
    archive = cert_manager_archive()
    program = binary.name.removeprefix("cert-manager-")
    stamp = "github.com/cert-manager/cert-manager/pkg/util"
    ldflags = (
        f"-s -w -X {stamp}.AppVersion={binary.version} -X {stamp}.AppGitCommit={archive.commit}"
    )
    if wrapped(CERT_MANAGER_MODULE, binary.version):
        build_in_wrapper(binary, out, f"{CERT_MANAGER_MODULE}/{program}-binary", ldflags)
        return
    vcert = SOURCE_ARCHIVES[(VCERT_MODULE, "v5.13.7")].unpacked()
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as scratch:
        tree = Path(scratch, "cert-manager")
        writable_copy(archive.unpacked(), tree)
        build_in_tree(binary, out, tree / "cmd" / program, ".", {VCERT_MODULE: vcert}, ldflags)


def cert_manager_local_chart() -> Path:
    """The chart of the archived release, packaged with its version as the release does."""
    version = CERT_MANAGER_BUILD_VERSION
    return package_chart(
        cert_manager_archive().unpacked() / "deploy/charts/cert-manager",
        f"cert-manager-{version}",
        ["--version", version, "--app-version", version],
    )


def package_chart(
    folder: Path, name: str, flags: Sequence[str] = (), dependencies: Sequence[Path] = ()
) -> Path:
    """`helm package` of a chart folder into CHARTS_DIR/<name>.tgz, once; dependencies are
    packaged charts put in its charts/ first."""
    out = CHARTS_DIR / f"{name}.tgz"
    if out.exists():
        return out
    helm = str(ensure(["helm"])["helm"])
    CHARTS_DIR.mkdir(parents=True, exist_ok=True)
    log_path = BUILD_LOG_DIR / f"{name}-chart.log"
    with tempfile.TemporaryDirectory(dir=CHARTS_DIR) as scratch:
        tree = Path(scratch, folder.name)
        writable_copy(folder, tree)
        for dependency in dependencies:
            (tree / "charts").mkdir(exist_ok=True)
            shutil.copy2(dependency, tree / "charts" / dependency.name)
        staged = Path(scratch, "out")
        staged.mkdir()
        run_logged([helm, "package", str(tree), *flags, "--destination", str(staged)], log_path)
        packages = list(staged.glob("*.tgz"))
        if len(packages) != 1:
            raise LabError(f"helm package {folder} wrote {packages}; see {log_path}")
        packages[0].rename(out)
    log(f"packaged {folder} as {out}")
    return out


# slurm-bridge (Slurm as a Kubernetes scheduler): the proxy refuses it, so it comes only from
# its release archive, with the slurm-client v1.2.1 archive its go.mod names; without them
# kind runs without the bridge. Its scheduler links Kubernetes' own (k8s.io/kubernetes
# v1.36.0): 3.9 core-minutes cold; admission and controllers then take seconds.
SLURM_BRIDGE_MODULE = "github.com/SlinkyProject/slurm-bridge"
SLURM_BRIDGE_VERSION = "v1.2.1"
SLURM_BRIDGE_PROGRAMS = ("scheduler", "admission", "controllers")
SCHEDULER_PLUGINS_MODULE = "sigs.k8s.io/scheduler-plugins"


def slurm_bridge_archive() -> SourceArchive:
    return SOURCE_ARCHIVES[(SLURM_BRIDGE_MODULE, SLURM_BRIDGE_VERSION)]


def slurm_bridge_buildable() -> bool:
    return (
        slurm_bridge_archive().present()
        and SOURCE_ARCHIVES[(SLURM_CLIENT_MODULE, SLURM_BRIDGE_VERSION)].present()
    )


def build_slurm_bridge(binary: Binary, out: Path) -> None:
    """cmd/<program> of the archived tree, as its Dockerfile builds it (static, no cgo)."""
    program = binary.name.removeprefix("slurm-bridge-")
    if wrapped(SLURM_BRIDGE_MODULE, binary.version):
        build_in_wrapper(binary, out, f"{SLURM_BRIDGE_MODULE}/cmd/{program}", "-s -w")
        return
    client = SOURCE_ARCHIVES[(SLURM_CLIENT_MODULE, SLURM_BRIDGE_VERSION)].unpacked()
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as scratch:
        tree = Path(scratch, "slurm-bridge")
        writable_copy(slurm_bridge_archive().unpacked(), tree)
        build_in_tree(binary, out, tree, f"./cmd/{program}", {SLURM_CLIENT_MODULE: client})


def slurm_bridge_podgroup_crd() -> Path:
    """The coscheduling PodGroup CRD (scheduling.x-k8s.io) of the scheduler-plugins module the
    bridge is built with: the bridge turns such a group into one Slurm job, but a site
    installs the CRD itself (the bridge's chart has none)."""
    go_mod = (slurm_bridge_archive().unpacked() / "go.mod").read_text()
    version = required_version(go_mod, SCHEDULER_PLUGINS_MODULE)
    if version is None:
        raise LabError(
            f"slurm-bridge {SLURM_BRIDGE_VERSION}'s go.mod requires no {SCHEDULER_PLUGINS_MODULE}"
        )
    module_dir = Path(go_mod_download(f"{SCHEDULER_PLUGINS_MODULE}@{version}")["Dir"])
    return module_dir / "manifests/coscheduling/crd.yaml"


def slurm_bridge_chart() -> Path:
    """helm/slurm-bridge of the archived release (its Chart.yaml has the release's version)."""
    version = SLURM_BRIDGE_VERSION.lstrip("v")
    return package_chart(
        slurm_bridge_archive().unpacked() / "helm/slurm-bridge", f"slurm-bridge-{version}"
    )


# The chart repository is a Go module too (its tags are the chart versions).
KEDA_CHARTS_MODULE = "github.com/kedacore/charts"
KEDA_PROGRAMS = {
    "keda-operator": "./cmd/operator",
    "keda-metrics-apiserver": "./cmd/adapter",
    "keda-admission-webhooks": "./cmd/webhooks",
}


# The trigger types KEDA's programs are built with here: the two the keda role's
# ScaledObjects use (prometheus, metrics-api) and the few that need no client library of
# their own. KEDA links the clients of all its 77 scalers into one package (cloud SDKs,
# Kafka, Temporal, Datadog, ...): its operator was the costliest cold build of the suite
# (4.6 to 9.3 core-minutes). Without them it compiles 1,290 packages instead of 2,013. A site
# runs the published image; the lab's differs only in the triggers it refuses ("no scaler
# found for type").
KEDA_LAB_TRIGGERS = (
    "prometheus",
    "metrics-api",
    "cpu",
    "memory",
    "cron",
    "external",
    "external-push",
    "kubernetes-workload",
)
# Declarations the kept scalers share with files of the dropped ones (KEDA_VERSION's).
KEDA_SHARED_CONSTANTS = ("externalMetricType",)
KEDA_BUILDER = "pkg/scaling/scalers_builder.go"
KEDA_TRIGGERS_BEGIN, KEDA_TRIGGERS_END = "// TRIGGERS-START", "// TRIGGERS-END"


@dataclass(frozen=True)
class KedaTriggerTrim:
    """buildScaler's switch cut to some trigger types, and the constructors that go with it."""

    builder: str  # the new scalers_builder.go
    kept: frozenset[str]  # constructors (scalers.New...) the kept cases call
    dropped: frozenset[str]  # constructors only dropped cases call


def trim_keda_triggers(builder: str, keep: Iterable[str]) -> KedaTriggerTrim:
    """KEDA's scalers_builder.go with only the `case`s of buildScaler's switch (between its
    TRIGGERS-START and TRIGGERS-END markers) that name a trigger type of `keep`, and its
    `default` (an unknown type's error). LabError when the file is not as expected or a
    wanted type has no case."""
    wanted = set(keep)
    try:
        begin = builder.index(KEDA_TRIGGERS_BEGIN)
        end = builder.index(KEDA_TRIGGERS_END, begin)
    except ValueError:
        raise LabError(
            f"{KEDA_BUILDER}: no {KEDA_TRIGGERS_BEGIN} ... {KEDA_TRIGGERS_END}"
        ) from None
    block = builder[begin:end]
    default = re.search(r"^\tdefault:\n(?:\t\t.*\n)+", block, re.MULTILINE)
    cases = re.findall(r"^\tcase ([^:\n]+):\n((?:\t\t.*\n)+)", block, re.MULTILINE)
    if default is None or not cases:
        raise LabError(f"{KEDA_BUILDER}: buildScaler's switch is not one case per trigger type")
    kept_cases: list[str] = []
    kept: set[str] = set()
    dropped: set[str] = set()
    found: set[str] = set()
    for labels, body in cases:
        types = set(re.findall(r'"([^"]+)"', labels))
        constructors = set(re.findall(r"scalers\.(New\w+)\(", body))
        if types & wanted:
            found |= types & wanted
            kept_cases.append(f"\tcase {labels}:\n{body}")
            kept |= constructors
        else:
            dropped |= constructors
    if missing := wanted - found:
        raise LabError(f"{KEDA_BUILDER}: no case for the trigger types {sorted(missing)}")
    switch = f"{KEDA_TRIGGERS_BEGIN}\n\tswitch triggerType {{\n{''.join(kept_cases)}{default.group(0)}\t}}\n\t"
    return KedaTriggerTrim(
        builder[:begin] + switch + builder[end:], frozenset(kept), frozenset(dropped - kept)
    )


def keda_variant() -> str:
    """The cached binaries' suffix: which trigger types they were built with."""
    digest = hashlib.sha256(" ".join(sorted(KEDA_LAB_TRIGGERS)).encode()).hexdigest()[:8]
    return f"-triggers-{digest}"


def keda_lab_module(version: str) -> Path:
    """A copy of KEDA's module at `version` whose buildScaler knows KEDA_LAB_TRIGGERS only,
    without the files of the other scalers (so their client libraries are not compiled);
    made once per version and set of triggers (under build_lock, as every build)."""
    tree = GO_DIR / "trimmed" / f"keda-{version}{keda_variant()}"
    if (tree / "go.mod").exists():
        return tree
    source = Path(go_mod_download(f"{KEDA_MODULE}@{version}")["Dir"])

    def fill(scratch: Path) -> None:
        # Files copied without their modes, so the copy can be edited (the lab's module
        # cache is writable: -modcacherw).
        shutil.copytree(
            source,
            scratch,
            dirs_exist_ok=True,
            copy_function=shutil.copyfile,
            ignore=shutil.ignore_patterns("*_test.go", "testdata"),
        )
        trim = trim_keda_triggers((scratch / KEDA_BUILDER).read_text(), KEDA_LAB_TRIGGERS)
        (scratch / KEDA_BUILDER).write_text(trim.builder)
        scalers = scratch / "pkg" / "scalers"
        shared: list[str] = []
        for path in sorted(scalers.glob("*.go")):
            text = path.read_text()
            defined = set(re.findall(r"^func (New\w+)\(", text, re.MULTILINE))
            if not defined or not defined <= trim.dropped:
                continue
            for name in KEDA_SHARED_CONSTANTS:
                shared += re.findall(rf"^\s*({name}\s*=\s*.+)$", text, re.MULTILINE)
            path.unlink()
        if len(shared) != len(KEDA_SHARED_CONSTANTS):
            raise LabError(
                f"KEDA {version}: found {shared} for the shared constants {KEDA_SHARED_CONSTANTS} "
                "in the dropped scalers' files; update KEDA_SHARED_CONSTANTS"
            )
        (scalers / "zz_hpcops_lab_shared.go").write_text(
            "// Generated by tests/lab/k8s_binaries.py: what the kept scalers used of the dropped files.\n"
            "package scalers\n\nconst (\n" + "".join(f"\t{line}\n" for line in shared) + ")\n"
        )

    tree.parent.mkdir(parents=True, exist_ok=True)
    replace_tree(tree, fill)
    return tree


def build_keda(binary: Binary, out: Path) -> None:
    """One of KEDA's programs as its Makefile builds it, from keda_lab_module's copy (its
    go.mod replaces only versions, so it builds inside the module)."""
    download = go_mod_download(f"{KEDA_MODULE}@{binary.version}")
    commit = module_info(download).get("Origin", {}).get("Hash", "")
    stamp = "github.com/kedacore/keda/v2/version"
    ldflags = f"-s -w -X={stamp}.Version={binary.version.lstrip('v')} -X={stamp}.GitCommit={commit}"
    tree = keda_lab_module(binary.version)
    go_build_in_tree(binary, out, tree, KEDA_PROGRAMS[binary.name], ldflags)


def keda_chart() -> Path:
    """KEDA's chart at KEDA_VERSION from the chart repository's module."""
    download = go_mod_download(f"{KEDA_CHARTS_MODULE}@{KEDA_VERSION}+incompatible")
    return package_chart(Path(download["Dir"]) / "keda", f"keda-{KEDA_VERSION.lstrip('v')}")


# The mariadb-operator, which makes slurmdbd's MariaDB as Slinky's installation guide does.
# Go's checksum database does not know v25.10.2 (it answers 404), so its download skips the
# checksum database for this module alone and the lab checks the hash pinned here instead
# (what the proxy served on 2026-11-27); its dependencies are checked against its go.sum.
MARIADB_OPERATOR_MODULE = "github.com/mariadb-operator/mariadb-operator/v25"
MARIADB_OPERATOR_VERSION = "v25.10.2"
MARIADB_OPERATOR_SUM = "h1:8c4yK5ZKpAZexUJJu9shp+W+TAOaFwHe528ksTE2UnA="
MARIADB_OPERATOR_CHARTS = ("mariadb-operator-crds", "mariadb-operator")


def mariadb_operator_module() -> Path:
    download = go_mod_download(f"{MARIADB_OPERATOR_MODULE}@{MARIADB_OPERATOR_VERSION}")
    if download.get("Sum") != MARIADB_OPERATOR_SUM:
        raise LabError(
            f"{MARIADB_OPERATOR_MODULE}@{MARIADB_OPERATOR_VERSION} has the hash "
            f"{download.get('Sum')}, not the {MARIADB_OPERATOR_SUM} the lab pins: the module "
            "changed on the proxy; remove it from the module cache and look before trusting it"
        )
    return Path(download["Dir"])


def build_mariadb_operator(binary: Binary, out: Path) -> None:
    """Its one program (controller, webhook and cert-controller are subcommands), as its
    Dockerfile builds it."""
    go_build_in_tree(binary, out, mariadb_operator_module(), "./cmd/controller", "-s -w")


def mariadb_operator_charts() -> dict[str, Path]:
    """Its CRDs chart and its operator chart (which names the CRDs chart as an optional
    dependency, so that one goes into it: helm refuses a chart with a dependency missing)."""
    charts = mariadb_operator_module() / "deploy/charts"
    version = MARIADB_OPERATOR_VERSION.lstrip("v")
    crds = package_chart(
        charts / MARIADB_OPERATOR_CHARTS[0], f"{MARIADB_OPERATOR_CHARTS[0]}-{version}"
    )
    operator = package_chart(
        charts / MARIADB_OPERATOR_CHARTS[1],
        f"{MARIADB_OPERATOR_CHARTS[1]}-{version}",
        dependencies=[crds],
    )
    return {MARIADB_OPERATOR_CHARTS[0]: crds, MARIADB_OPERATOR_CHARTS[1]: operator}


# MetalLB, the LoadBalancer provider of the kind scenarios (L2 mode: its controller and its
# speaker, without FRR). Its chart is in the module, with its CRDs as a subchart.
METALLB_MODULE = "go.universe.tf/metallb"
METALLB_VERSION = "v0.16.2"
METALLB_PROGRAMS = {"metallb-controller": "./controller", "metallb-speaker": "./speaker"}
# MetalLB 0.16.2 requires frr-k8s v0.0.27, which the proxy here refuses (403). It is built
# against v0.26 (served) with the one thing of 0.0.27 it names: the AS-path-prepend prefixes
# of its BGP-over-frr-k8s backend, which L2 mode never uses.
FRR_K8S_MODULE = "github.com/metallb/frr-k8s"
FRR_K8S_SERVED = "v0.0.26"
FRR_K8S_ADDED = """package v1beta1

// Added by the hpcops.slinky lab (tests/lab/k8s_binaries.py): frr-k8s v0.0.27's type, which
// MetalLB v0.16.2 names; the proxy serves v0.0.26 at most.
type AsPathPrependPrefixes struct {
\tAsPathPrepend uint8    `json:"asPathPrepend,omitempty"`
\tPrefixes      []string `json:"prefixes,omitempty"`
}
"""


def build_metallb(binary: Binary, out: Path) -> None:
    """As its Dockerfiles build them (the version is in its source), against the served
    frr-k8s with FRR_K8S_ADDED."""
    source = Path(go_mod_download(f"{METALLB_MODULE}@{METALLB_VERSION}")["Dir"])
    frr = Path(go_mod_download(f"{FRR_K8S_MODULE}@{FRR_K8S_SERVED}")["Dir"])
    with tempfile.TemporaryDirectory(prefix="metallb-", dir=BIN_DIR) as scratch:
        tree, frr_tree = Path(scratch, "metallb"), Path(scratch, "frr-k8s")
        writable_copy(source, tree)
        writable_copy(frr, frr_tree)
        types = frr_tree / "api/v1beta1/frrconfiguration_types.go"
        field = '\tPrefixesWithCommunity []CommunityPrefixes `json:"withCommunity,omitempty"`\n'
        text = types.read_text()
        if field not in text:
            raise LabError(f"{types} changed: the lab's addition to frr-k8s needs a look")
        added = '\tPrefixesWithAsPathPrepend []AsPathPrependPrefixes `json:"withAsPathPrepend,omitempty"`\n'
        types.write_text(text.replace(field, field + added, 1))
        (frr_tree / "api/v1beta1/zz_hpcops_aspathprepend.go").write_text(FRR_K8S_ADDED)
        build_in_tree(binary, out, tree, METALLB_PROGRAMS[binary.name], {FRR_K8S_MODULE: frr_tree})


def metallb_chart() -> Path:
    """Its chart (the CRDs subchart inside; the frr-k8s one stays, switched off)."""
    source = Path(go_mod_download(f"{METALLB_MODULE}@{METALLB_VERSION}")["Dir"])
    return package_chart(source / "charts/metallb", f"metallb-{METALLB_VERSION.lstrip('v')}")


PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
PROMETHEUS_OPERATOR_PROGRAMS = {
    "prometheus-operator": "./cmd/operator",
    "prometheus-config-reloader": "./cmd/prometheus-config-reloader",
}
# Its go.mod points these at ./pkg/..., which the module's zip leaves out (they are modules
# of their own); without the replace lines the proxy's releases of them are used.
PROMETHEUS_OPERATOR_NESTED = ("pkg/apis/monitoring", "pkg/client")


def prometheus_operator_module() -> Path:
    return Path(
        go_mod_download(f"{PROMETHEUS_OPERATOR_MODULE}@{PROMETHEUS_OPERATOR_VERSION}")["Dir"]
    )


def build_prometheus_operator(binary: Binary, out: Path) -> None:
    download = go_mod_download(f"{PROMETHEUS_OPERATOR_MODULE}@{binary.version}")
    commit = module_info(download).get("Origin", {}).get("Hash", "")
    stamp = "github.com/prometheus/common/version"
    ldflags = (
        f"-s -w -X {stamp}.Version={binary.version.lstrip('v')} -X {stamp}.Revision={commit} "
        f"-X {stamp}.Branch=HEAD"
    )
    drops = [
        f"-dropreplace={PROMETHEUS_OPERATOR_MODULE}/{nested}"
        for nested in PROMETHEUS_OPERATOR_NESTED
    ]
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as scratch:
        tree = Path(scratch, "prometheus-operator")
        writable_copy(download["Dir"], tree)
        run_logged(["go", "mod", "edit", *drops], binary.build_log, cwd=tree)
        go_build_in_tree(binary, out, tree, PROMETHEUS_OPERATOR_PROGRAMS[binary.name], ldflags)


def prometheus_operator_manifests() -> list[Path]:
    """The CRDs, then the operator's RBAC and Service account, from its module (the
    Deployment the kind scenario writes itself, with the local images)."""
    module = prometheus_operator_module()
    crds = sorted((module / "example/prometheus-operator-crd").glob("*.yaml"))
    rbac = [
        module / f"example/rbac/prometheus-operator/prometheus-operator-{name}.yaml"
        for name in ("service-account", "cluster-role", "cluster-role-binding")
    ]
    if not crds or not all(path.exists() for path in rbac):
        raise LabError(
            f"prometheus-operator {PROMETHEUS_OPERATOR_VERSION}: no CRDs or RBAC in {module}/example"
        )
    return [*crds, *rbac]


# --------------------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------------------


WRAPPER_MODULE = "hpcops.io/lab/kubernetes"


@dataclass(frozen=True)
class WrappedRelease:
    """A release built in the wrapper module from its archive: its modules (path ->
    folder of the unpacked tree), the archives it needs, and the commands it builds."""

    name: str
    archives: tuple[tuple[str, str], ...]  # SOURCE_ARCHIVES keys; the first is the release's
    modules: tuple[tuple[str, str], ...]  # (module path, folder within the archive's tree)
    commands: tuple[str, ...]  # import paths of its main packages

    def present(self) -> bool:
        return all(SOURCE_ARCHIVES[key].present() for key in self.archives)


# The archived releases whose Kubernetes libraries are the lab's minor (v0.36): built in
# the wrapper with its flags, so the packages they share with Kubernetes and helm (all of
# client-go, controller-runtime, the scheduler framework the bridge links) are compiled
# once. Alone, each compiled its own copies: 10.3 core-minutes in a cold run; in the
# wrapper 5.4 (most of it controller-runtime, compiled once for the three; an empty build
# cache, module cache warm, a faster day: read the two as a rough ratio).
# Their go.mods replace nothing but cert-manager's root (its programs are nested modules),
# so the wrapper's replace lines say all they do. slurm-operator v1.1.0 (Kubernetes 1.35)
# and the proxy's modules (their own version pins, e.g. KEDA's v0.35.5) stay apart.
WRAPPED_RELEASES = (
    WrappedRelease(
        "cert-manager",
        ((CERT_MANAGER_MODULE, CERT_MANAGER_BUILD_VERSION), (VCERT_MODULE, "v5.13.7")),
        (
            (CERT_MANAGER_MODULE, "."),
            *((f"{CERT_MANAGER_MODULE}/{c}-binary", f"cmd/{c}") for c in CERT_MANAGER_COMMANDS),
        ),
        tuple(f"{CERT_MANAGER_MODULE}/{c}-binary" for c in CERT_MANAGER_COMMANDS),
    ),
    WrappedRelease(
        "slurm-operator",
        ((SLINKY_OPERATOR_MODULE, "v1.2.1"), (SLURM_CLIENT_MODULE, "v1.2.1")),
        ((SLINKY_OPERATOR_MODULE, "."),),
        tuple(f"{SLINKY_OPERATOR_MODULE}/{c.removeprefix('./')}" for c in SLINKY_COMMANDS.values()),
    ),
    WrappedRelease(
        "slurm-bridge",
        ((SLURM_BRIDGE_MODULE, SLURM_BRIDGE_VERSION), (SLURM_CLIENT_MODULE, SLURM_BRIDGE_VERSION)),
        ((SLURM_BRIDGE_MODULE, "."),),
        tuple(f"{SLURM_BRIDGE_MODULE}/cmd/{p}" for p in SLURM_BRIDGE_PROGRAMS),
    ),
)


def wrapped_releases() -> list[WrappedRelease]:
    """The WRAPPED_RELEASES whose archives are here (an operator given by hand is built
    from its own tree)."""
    return [
        release
        for release in WRAPPED_RELEASES
        if release.present()
        and not (
            SLINKY_SOURCE_OVERRIDE
            and release.archives[0] == (SLINKY_OPERATOR_MODULE, LAB_SLINKY_VERSION)
        )
    ]


def wrapped(module: str, version: str) -> bool:
    """True when the wrapper module builds that release's programs."""
    return any(release.archives[0] == (module, version) for release in wrapped_releases())


def wrapper_commands() -> list[str]:
    """Every command the wrapper module builds: the Kubernetes commands, helm and the
    programs of the wrapped releases."""
    return [
        *(f"k8s.io/kubernetes/cmd/{c}" for c in (*KUBERNETES_COMMANDS, *KUBERNETES_NODE_COMMANDS)),
        f"{HELM_MODULE}/cmd/helm",
        *(command for release in wrapped_releases() for command in release.commands),
    ]


def wrapper_modules() -> dict[str, tuple[str, Path | None]]:
    """module -> (the version required, the local tree replacing it or None)."""
    download = go_mod_download(f"k8s.io/kubernetes@{KUBERNETES_VERSION}")
    upstream = Path(download["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/", upstream, re.MULTILINE)
    if not staging:
        raise LabError(f"no staging replace lines in {download['GoMod']}")
    staging_version = "v0." + KUBERNETES_VERSION.split(".", 1)[1]
    modules: dict[str, tuple[str, Path | None]] = {
        "k8s.io/kubernetes": (KUBERNETES_VERSION, None),
        HELM_MODULE: (HELM_VERSION, None),
        **{module: (staging_version, None) for module in staging},
    }
    for release in wrapped_releases():
        for module, version in release.archives:
            modules[module] = (version, SOURCE_ARCHIVES[(module, version)].unpacked())
        root = SOURCE_ARCHIVES[release.archives[0]].unpacked()
        for module, folder in release.modules:
            # A nested module's version is a placeholder: it is never published.
            modules[module] = (modules.get(module, ("v0.0.0", None))[0], root / folder)
    return modules


def kubernetes_wrapper() -> Path:
    """A module that requires k8s.io/kubernetes, its staging modules, helm and the wrapped
    releases (replaced by their unpacked archives); made once per set of members.

    k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...) at v0.0.0
    and replaces them with ./staging paths that a dependency's replace lines cannot use,
    so the wrapper requires each of them at the published v0.<minor>.<patch>. Every program
    is built here: one module graph, so the packages they use are compiled once (the
    versions are the highest any member asks for, e.g. golang.org/x/net, as Go's module
    resolution picks; check_wrapper_versions refuses a graph that moved a pinned one).
    """
    members = "".join(f"-{release.name}" for release in wrapped_releases())
    name = f"kubernetes-{KUBERNETES_VERSION}-helm-{HELM_VERSION}{members}"
    wrapper = GO_DIR / "wrappers" / name
    if (wrapper / "go.sum").exists():
        return wrapper
    modules = wrapper_modules()
    requires = [f"\t{module} {version}" for module, (version, _tree) in modules.items()]
    replaces = [f"\t{module} => {tree}" for module, (_v, tree) in modules.items() if tree]
    upstream = Path(go_mod_download(f"k8s.io/kubernetes@{KUBERNETES_VERSION}")["GoMod"])
    go_mod = (
        "// Generated by tests/lab/k8s_binaries.py: builds Kubernetes, helm and the wrapped releases.\n"
        f"module {WRAPPER_MODULE}\n\n"
        f"go {go_directive(upstream.read_text())}\n\nrequire (\n"
        + "\n".join(requires)
        + "\n)\n"
        + ("\nreplace (\n" + "\n".join(replaces) + "\n)\n" if replaces else "")
    )
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".kubernetes-", dir=wrapper.parent))
    try:
        (scratch / "go.mod").write_text(go_mod)
        # Resolves every package the commands import, with the tags they are built with, and
        # writes go.sum (`go get` would ask the proxy about the replaced modules, which it
        # refuses; `go mod tidy` would drop the staging modules k8s.io/kubernetes requires).
        run_logged(
            [
                "go",
                "list",
                "-mod=mod",
                "-tags",
                KUBERNETES_BUILD_TAGS,
                "-deps",
                *wrapper_commands(),
            ],
            BUILD_LOG_DIR / "kubernetes-wrapper.log",
            cwd=scratch,
        )
        check_wrapper_versions(scratch, modules)
        scratch.rename(wrapper)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return wrapper


def check_wrapper_versions(wrapper: Path, modules: Mapping[str, tuple[str, Path | None]]) -> None:
    """LabError unless the wrapper resolved every module it requires to exactly its pin: a
    member that asked for a newer Kubernetes or helm would change what the lab tests."""
    proc = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Path}} {{.Version}}", *modules],
        capture_output=True,
        text=True,
        cwd=wrapper,
        env=go_env(),
        check=False,
    )
    resolved = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    moved = {
        module: resolved.get(module, "missing")
        for module, (pinned, _tree) in modules.items()
        if resolved.get(module) != pinned
    }
    if proc.returncode != 0 or moved:
        raise LabError(
            f"the Kubernetes wrapper module in {wrapper} resolved "
            + (", ".join(f"{module} {version}" for module, version in moved.items()) or "nothing")
            + f" against the pins ({proc.stderr.strip()[:300]}): a member requires newer "
            "releases; take it out of WRAPPED_RELEASES"
        )


def kubernetes_ldflags() -> str:
    """-X flags that stamp the version as Kubernetes' hack/lib/version.sh does."""
    info = module_info(go_mod_download(f"k8s.io/kubernetes@{KUBERNETES_VERSION}"))
    major, minor = KUBERNETES_VERSION[1:].split(".")[:2]
    values = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": info.get("Origin", {}).get("Hash", ""),
        "gitTreeState": "clean",
        # The tag's time, so the same version always builds the same binary.
        "buildDate": info["Time"],
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def build_kubernetes_command(binary: Binary, out: Path) -> None:
    check_kubernetes_skew()
    build_in_wrapper(binary, out, f"k8s.io/kubernetes/cmd/{binary.name}", kubernetes_ldflags())


def build_in_wrapper(binary: Binary, out: Path, package: str, ldflags: str) -> None:
    """`go build` of a command of the wrapper module, every one with the same flags and
    tags, so that the packages they share are compiled once."""
    run_logged(
        [
            "go",
            "build",
            "-trimpath",
            "-tags",
            KUBERNETES_BUILD_TAGS,
            "-ldflags",
            ldflags,
            "-o",
            str(out),
            package,
        ],
        binary.build_log,
        cwd=kubernetes_wrapper(),
    )


# --------------------------------------------------------------------------------------
# kwok, helm
# --------------------------------------------------------------------------------------


def build_kwok(binary: Binary, out: Path) -> None:
    go_install(binary, out, "sigs.k8s.io/kwok/cmd/kwok")


def build_helm(binary: Binary, out: Path) -> None:
    download = go_mod_download(f"{HELM_MODULE}@{binary.version}")
    # Helm's Makefile derives its default Kubernetes version from the client-go it uses.
    client_go = required_version(Path(download["GoMod"]).read_text(), "k8s.io/client-go")
    if client_go is None:
        raise LabError(f"helm {binary.version}: no k8s.io/client-go in its go.mod")
    kube_major, kube_minor = str(int(client_go[1:].split(".")[0]) + 1), client_go.split(".")[1]
    commit = module_info(download).get("Origin", {}).get("Hash", "")
    flags = [
        "-s",
        "-w",
        f"-X helm.sh/helm/v3/internal/version.version={binary.version}",
        f"-X helm.sh/helm/v3/internal/version.gitCommit={commit}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ]
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [
            f"-X {package}.k8sVersionMajor={kube_major}",
            f"-X {package}.k8sVersionMinor={kube_minor}",
        ]
    build_in_wrapper(binary, out, f"{HELM_MODULE}/cmd/helm", " ".join(flags))


def go_build_in_module(binary: Binary, out: Path, module: str, package: str, ldflags: str) -> None:
    """`go build` in the downloaded module: the proxy refuses some modules' version lists,
    which `go install pkg@version` reads (for deprecations) and `go build` does not."""
    source = Path(go_mod_download(f"{module}@{binary.version}")["Dir"])
    go_build_in_tree(binary, out, source, package, ldflags)


def go_build_in_tree(binary: Binary, out: Path, tree: Path, package: str, ldflags: str) -> None:
    """`go build` of a package of the module in `tree`, with the dependencies its go.mod names."""
    run_logged(
        ["go", "build", "-mod=mod", "-trimpath", "-ldflags", ldflags, "-o", str(out), package],
        binary.build_log,
        cwd=tree,
    )


def build_pushgateway(binary: Binary, out: Path) -> None:
    # Prometheus' release builds stamp the version into prometheus/common; so does this one.
    stamp = f"-s -w -X github.com/prometheus/common/version.Version={binary.version.lstrip('v')}"
    go_build_in_module(binary, out, "github.com/prometheus/pushgateway", ".", stamp)


# --------------------------------------------------------------------------------------
# The kind node image's own binaries (tests/lab/kind_images.py)
# --------------------------------------------------------------------------------------

KIND_VERSION = "v0.33.0"
CRICTL_VERSION = "v1.36.0"
COREDNS_VERSION = "v1.14.2"
# What kubeadm v1.36.2 asks for (cmd/kubeadm/app/constants): etcd 3.6, since it passes
# --feature-gates, which the lab's etcd 3.5 refuses.
KUBEADM_ETCD_VERSION = "v3.6.8"
ETCD_MODULES = ("server/v3", "api/v3", "client/pkg/v3", "client/v3", "pkg/v3")


def build_kind(binary: Binary, out: Path) -> None:
    go_install(binary, out, "sigs.k8s.io/kind")


def build_crictl(binary: Binary, out: Path) -> None:
    stamp = f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={binary.version}"
    go_build_in_module(binary, out, "sigs.k8s.io/cri-tools", "./cmd/crictl", stamp)


# The plugins of the Corefile kubeadm writes and kind keeps (plugin/metrics is `prometheus`),
# and `log` to debug by hand. The release build's 58 plugins bring the cloud providers' SDKs
# and tracing: a third of the build's CPU for nothing kind reads.
COREDNS_PLUGINS = (
    "cache", "errors", "forward", "health", "kubernetes", "loadbalance", "log", "loop",
    "metrics", "ready", "reload",
)  # fmt: skip


def build_coredns(binary: Binary, out: Path) -> None:
    """CoreDNS with COREDNS_PLUGINS alone: a copy of its module whose generated plugin list
    (core/plugin/zplugin.go) names them, its go.mod and go.sum unchanged (Go allows no
    overlay of the module cache)."""
    source = Path(go_mod_download(f"github.com/coredns/coredns@{binary.version}")["Dir"])
    imports = "".join(
        f'\t_ "github.com/coredns/coredns/plugin/{name}"\n' for name in COREDNS_PLUGINS
    )
    with tempfile.TemporaryDirectory(dir=GO_DIR) as scratch:
        tree = Path(scratch, "coredns")
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("test", "man", "*_test.go"))
        (tree / "core/plugin/zplugin.go").write_text(
            f"// Generated by tests/lab/k8s_binaries.py.\n\npackage plugin\n\nimport (\n{imports})\n"
        )
        go_build_in_tree(binary, out, tree, ".", "-s -w")


def build_kubeadm_etcd(binary: Binary, out: Path) -> None:
    """etcd's server through a wrapper module: its go.mod replaces the sibling modules with
    ../api and so on, which only its own repository can resolve."""
    wrapper = GO_DIR / "wrappers" / f"etcd-{binary.version}"
    if not (wrapper / "go.sum").exists():
        requires = "\n".join(f"\tgo.etcd.io/etcd/{sub} {binary.version}" for sub in ETCD_MODULES)
        download = go_mod_download(f"go.etcd.io/etcd/server/v3@{binary.version}")
        go_mod = (
            "// Generated by tests/lab/k8s_binaries.py: builds etcd from its modules.\n"
            "module hpcops.io/lab/etcd\n\n"
            f"go {go_directive(Path(download['GoMod']).read_text())}\n\n"
            f"require (\n{requires}\n)\n"
        )
        scratch = Path(tempfile.mkdtemp(prefix=".etcd-", dir=GO_DIR))
        try:
            (scratch / "go.mod").write_text(go_mod)
            run_logged(
                ["go", "get", f"go.etcd.io/etcd/server/v3@{binary.version}"],
                binary.build_log,
                cwd=scratch,
            )
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            scratch.rename(wrapper)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    run_logged(
        [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(out),
            "go.etcd.io/etcd/server/v3",
        ],
        binary.build_log,
        cwd=wrapper,
    )


# --------------------------------------------------------------------------------------
# etcd from Debian
# --------------------------------------------------------------------------------------


def apt_options() -> list[str]:
    """apt options that read and write only APT_DIR, never the host's sources or lists."""
    return [
        f"-o=Dir::Etc::sourcelist={APT_DIR / 'sources.list'}",
        f"-o=Dir::Etc::sourceparts={APT_DIR / 'sources.list.d'}",
        f"-o=Dir::State::Lists={APT_DIR / 'lists'}",
        f"-o=Dir::Cache={APT_DIR / 'cache'}",
        f"-o=Dir::Cache::archives={APT_DIR / 'archives'}",
        # Testing suites may serve a Release file past its Valid-Until date.
        "-o=Acquire::Check-Valid-Until=false",
        # The download directory belongs to root; do not hand it to the _apt user.
        "-o=APT::Sandbox::User=root",
        "-o=Debug::NoLocking=true",
    ]


def unpack_debian_package(package: str, root: Path, log_path: Path) -> None:
    """Download one package of ETCD_SUITE with apt (APT_DIR only) and unpack it into root."""
    for sub in ("sources.list.d", "lists/partial", "cache", "archives/partial"):
        (APT_DIR / sub).mkdir(parents=True, exist_ok=True)
    (APT_DIR / "sources.list").write_text(
        f"deb [signed-by={DEBIAN_KEYRING}] {debian_mirror()} {ETCD_SUITE} main\n"
    )
    run_logged(["apt-get", *apt_options(), "-q", "update"], log_path)
    with tempfile.TemporaryDirectory(dir=APT_DIR) as scratch:
        run_logged(
            ["apt-get", *apt_options(), "-q", "download", package], log_path, cwd=Path(scratch)
        )
        debs = list(Path(scratch).glob(f"{package}_*.deb"))
        if len(debs) != 1:
            raise LabError(f"apt-get download {package} left {debs}; see {log_path}")
        run_logged(["dpkg-deb", "-x", str(debs[0]), str(root)], log_path)


def build_etcd(binary: Binary, out: Path) -> None:
    with tempfile.TemporaryDirectory(dir=BIN_DIR) as scratch:
        unpack_debian_package(ETCD_PACKAGE, Path(scratch), binary.build_log)
        shutil.move(f"{scratch}/usr/bin/etcd", out)


# --------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------


def slinky_operator(version: str) -> Binary:
    """The operator of one Slinky release; it has no --version flag: -help lists its flags."""
    return Binary(
        "slurm-operator",
        version,
        build_slinky_operator,
        ("-help",),
        "-slurmclient-workers",
        3.5,
        optimized=not wrapped(SLINKY_OPERATOR_MODULE, version),
    )


def slinky_webhook(version: str) -> Binary:
    return Binary(
        "slurm-operator-webhook",
        version,
        build_slinky_operator,
        ("-help",),
        "-server-addr",
        0.5,
        optimized=not wrapped(SLINKY_OPERATOR_MODULE, version),
    )


def kubernetes_binary(name: str, cold_minutes: float) -> Binary:
    check, expect = {
        "kubectl": (("version", "--client"), f"Client Version: {KUBERNETES_VERSION}"),
        "kubeadm": (("version", "-o", "short"), KUBERNETES_VERSION),
    }.get(name, (("--version",), f"Kubernetes {KUBERNETES_VERSION}"))
    return Binary(name, KUBERNETES_VERSION, build_kubernetes_command, check, expect, cold_minutes)


BINARIES: dict[str, Binary] = {
    b.name: b
    for b in (
        kubernetes_binary("kube-apiserver", 11),
        kubernetes_binary("kube-controller-manager", 2),
        kubernetes_binary("kube-scheduler", 0.2),
        kubernetes_binary("kubectl", 0.7),
        Binary(
            "etcd", ETCD_SERIES, build_etcd, ("--version",), f"etcd Version: {ETCD_SERIES}.", 0.3
        ),
        Binary(
            "kwok",
            KWOK_VERSION,
            build_kwok,
            ("--version",),
            KWOK_VERSION.lstrip("v"),
            4,
            optimized=False,
        ),
        Binary("helm", HELM_VERSION, build_helm, ("version", "--short"), HELM_VERSION, 2.5),
        Binary(
            "pushgateway",
            PUSHGATEWAY_VERSION,
            build_pushgateway,
            ("--version",),
            f"version {PUSHGATEWAY_VERSION.lstrip('v')}",
            1,
            optimized=False,
        ),
        # The kind node image (tests/lab/kind_images.py); the lab itself never needs these.
        kubernetes_binary("kubelet", 0.7),
        kubernetes_binary("kubeadm", 0.5),
        kubernetes_binary("kube-proxy", 0.2),
        Binary(
            "kind",
            KIND_VERSION,
            build_kind,
            ("version",),
            f"kind {KIND_VERSION}",
            0.4,
            optimized=False,
        ),
        Binary(
            "crictl", CRICTL_VERSION, build_crictl, ("--version",), CRICTL_VERSION.lstrip("v"), 0.7
        ),
        Binary(
            "kubeadm-etcd",
            KUBEADM_ETCD_VERSION,
            build_kubeadm_etcd,
            ("--version",),
            f"etcd Version: {KUBEADM_ETCD_VERSION.lstrip('v')}",
            0.9,
        ),
        Binary(
            "coredns",
            COREDNS_VERSION,
            build_coredns,
            ("-version",),
            f"CoreDNS-{COREDNS_VERSION.lstrip('v')}",
            1.2,
        ),
        slinky_operator(LAB_SLINKY_VERSION),
        slinky_webhook(LAB_SLINKY_VERSION),
        *(
            Binary(
                f"cert-manager-{program}",
                CERT_MANAGER_BUILD_VERSION,
                build_cert_manager,
                ("--help",),
                "cert-manager",
                minutes,
                optimized=not wrapped(CERT_MANAGER_MODULE, CERT_MANAGER_BUILD_VERSION),
            )
            for program, minutes in zip(CERT_MANAGER_COMMANDS, (1.5, 1.7, 0.1, 0.2), strict=True)
            if cert_manager_buildable()
        ),
        *(
            Binary(
                f"slurm-bridge-{program}",
                SLURM_BRIDGE_VERSION,
                build_slurm_bridge,
                ("--help",),
                "-config",
                minutes,
                optimized=not wrapped(SLURM_BRIDGE_MODULE, SLURM_BRIDGE_VERSION),
            )
            for program, minutes in zip(SLURM_BRIDGE_PROGRAMS, (3.9, 0.1, 0.1), strict=True)
            if slurm_bridge_buildable()
        ),
        *(
            Binary(
                name,
                KEDA_VERSION,
                build_keda,
                ("--help",),
                "--cert-dir",
                minutes,
                optimized=False,
                variant=keda_variant(),
            )
            for name, minutes in zip(KEDA_PROGRAMS, (2, 0.7, 0.3), strict=True)
        ),
        *(
            Binary(
                name,
                PROMETHEUS_OPERATOR_VERSION,
                build_prometheus_operator,
                ("--version",),
                PROMETHEUS_OPERATOR_VERSION.lstrip("v"),
                minutes,
                optimized=False,
            )
            for name, minutes in zip(PROMETHEUS_OPERATOR_PROGRAMS, (1.8, 0.1), strict=True)
        ),
        Binary(
            "mariadb-operator",
            MARIADB_OPERATOR_VERSION,
            build_mariadb_operator,
            ("--help",),
            "mariadb-operator",
            3,
            optimized=False,
        ),
        *(
            Binary(
                name,
                METALLB_VERSION,
                build_metallb,
                ("--help",),
                "Usage of",
                minutes,
                optimized=False,
            )
            for name, minutes in zip(METALLB_PROGRAMS, (1.5, 1.5), strict=True)
        ),
    )
}


def binary(name: str) -> Binary:
    if name not in BINARIES:
        raise LabError(f"unknown binary {name!r}; known: {', '.join(BINARIES)}")
    return BINARIES[name]


def check_binary(binary: Binary, path: Path) -> str:
    """The first line of what the binary says about itself; LabError unless it names the version."""
    try:
        proc = subprocess.run(
            [str(path), *binary.check_args], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as err:
        raise LabError(f"{path} does not run: {err}") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 or binary.expect not in output:
        raise LabError(
            f"{path} {' '.join(binary.check_args)} exited {proc.returncode} without "
            f"{binary.expect!r}: {output.strip()[:400]}"
        )
    return next(line.strip() for line in output.splitlines() if binary.expect in line)


def build_lock() -> contextlib.AbstractContextManager[None]:
    """One build at a time per cache (make and pytest may both ask for the binaries)."""
    return file_lock(BIN_DIR)


def build_one(binary: Binary) -> float:
    """Build, check and install one binary; the seconds it took."""
    BUILD_LOG_DIR.mkdir(parents=True, exist_ok=True)
    binary.build_log.unlink(missing_ok=True)
    log(
        f"building {binary.name} {binary.version} (cold: about {binary.cold_minutes:g} min; log: {binary.build_log})..."
    )
    started = time.monotonic()
    cpu_before = children_cpu_s()
    scratch = binary.path.with_name(f".{binary.path.name}.new")
    scratch.unlink(missing_ok=True)
    global _unoptimized_build  # noqa: PLW0603 - one build at a time (build_lock)
    _unoptimized_build = not binary.optimized
    try:
        binary.build(binary, scratch)
        scratch.chmod(0o755)
        said = check_binary(binary, scratch)
        scratch.rename(binary.path)
    finally:
        _unoptimized_build = False
        scratch.unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    cpu_s = children_cpu_s() - cpu_before
    log(f"built {binary.path} in {format_duration(elapsed)} ({cpu_s / 60:.1f} core-min): {said}")
    record_build_time(binary.path.name, elapsed)
    return elapsed


def children_cpu_s() -> float:
    """CPU seconds (user + system) of the commands this process ran and waited for: with
    the wall time, what a build cost on a machine that does other work meanwhile."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record_build_time(name: str, seconds: float, path: Path = BUILD_TIMES) -> None:
    """Keep how long the last build of name took, in the JSON file at path."""
    times = load_build_times(path)
    times[name] = round(seconds, 1)
    path.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n")


def load_build_times(path: Path = BUILD_TIMES) -> dict[str, float]:
    return read_json(path)


def format_duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


def ensure(names: Sequence[str] | None = None) -> dict[str, Path]:
    """Paths of the named binaries (default: all), building those that are missing."""
    wanted = [binary(name) for name in (names or BINARIES)]
    ensure_binaries(wanted)
    return {b.name: b.path for b in wanted}


def ensure_slinky(versions: Sequence[str] = SLINKY_VERSIONS) -> dict[str, dict[str, Path]]:
    """Each Slinky release's operator and charts, built from one tree; version -> name -> path."""
    operators = [slinky_operator(version) for version in versions]
    ensure_binaries(operators)
    return {
        op.version: {"slurm-operator": op.path, **slinky_charts(op.version)} for op in operators
    }


def ensure_binaries(wanted: Sequence[Binary]) -> None:
    """Build those of wanted that are missing, one build at a time."""
    missing = [b for b in wanted if not b.path.exists()]
    if missing:
        require_go()
        timings: dict[str, float] = {}
        with build_lock():
            for b in missing:
                if not b.path.exists():  # another process may have built it meanwhile
                    timings[b.path.name] = build_one(b)
        if timings:
            summary = ", ".join(f"{name} {format_duration(s)}" for name, s in timings.items())
            log(f"build times: {summary} (total {format_duration(sum(timings.values()))})")


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace) -> int:
    for name, path in ensure(args.only).items():
        print(f"{name:<24}{path}")
    if not args.only:
        for version, paths in ensure_slinky().items():
            for name, path in paths.items():
                print(f"{name + ' ' + version:<24}{path}")
    return 0


def all_binaries() -> list[Binary]:
    """The catalogue and the operator of every Slinky release the lab builds."""
    return [*BINARIES.values(), *(slinky_operator(v) for v in SLINKY_VERSIONS)]


def cmd_list(args: argparse.Namespace) -> int:
    times = load_build_times()
    missing = 0
    for b in dict.fromkeys(all_binaries()):
        if not b.path.exists():
            missing += 1
            print(f"{b.name:<24}{b.version:<10}MISSING  {b.path}")
            continue
        built = times.get(b.path.name)
        took = f"  (built in {format_duration(built)})" if built is not None else ""
        print(f"{b.name:<24}{b.version:<10}{b.path}\n{'':<34}{check_binary(b, b.path)}{took}")
    return 1 if missing else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pinned, cached binaries of the Kubernetes lab.")
    parser.add_argument("command", choices=("build", "list"))
    parser.add_argument(
        "--only", action="append", choices=list(BINARIES), help="build: just this one (repeatable)"
    )
    args = parser.parse_args(argv)
    command = cmd_build if args.command == "build" else cmd_list
    return run_cli("k8s_binaries", lambda: command(args))


if __name__ == "__main__":
    sys.exit(main())
