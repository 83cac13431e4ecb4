# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's toolbox: what every file of tests/lab (and the tests that drive it) shares.

Nothing here knows Slurm or Kubernetes: the error type, host commands, waiting, locks and
JSON state files, processes by pid, mounts, chroots and network namespaces, Debian roots,
one HTTP call, and the CLI glue of the lab's scripts.  The labs built on it:
``slurm_lab.py`` (Slurm per release), ``k8s_lab.py`` (Kubernetes with kwok nodes),
``slurm_pods.py`` and ``pod_runner.py`` (the Slinky pods), ``k8s_binaries.py`` and
``kind_images.py`` (builds), ``docker_engine.py`` and ``node_hosts.py`` (containers).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# Builds and chroots, kept across runs; runtime files (pids, keys, logs), gone at reboot.
CACHE_DIR = Path(os.environ.get("HPCOPS_LAB_CACHE", "/var/cache/hpcops-lab"))
RUN_DIR = Path(os.environ.get("HPCOPS_LAB_RUN", "/run/hpcops-lab"))

T = TypeVar("T")


class LabError(Exception):
    """A lab operation failed; the message says what to look at."""


def logger(name: str) -> Callable[[str], None]:
    """A log function that writes `[name] message` to stderr."""

    def log(message: str) -> None:
        print(f"[{name}] {message}", file=sys.stderr, flush=True)

    return log


# --------------------------------------------------------------------------------------
# Commands, waiting, files
# --------------------------------------------------------------------------------------


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a host command, failing with its stderr in the message."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def run_logged(cmd: Sequence[str], log_path: Path) -> None:
    """Run a command with its output appended to log_path; LabError naming the log."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    with log_path.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
        ).returncode
    if code != 0:
        raise LabError(f"{' '.join(cmd[:4])}... failed ({code}); see {log_path}")


def wait_until(
    probe: Callable[[], T | None],
    timeout_s: float,
    what: str,
    seen: Callable[[], object] | None = None,
) -> T:
    """Poll probe until it returns something truthy; LabError after timeout_s, which says
    what `seen` returns then (the state the wait last saw), so a timeout explains itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            saw = ""
            if seen is not None:
                try:
                    saw = f"; last seen: {seen()}"
                except Exception as err:  # noqa: BLE001 - the timeout is the error to raise
                    saw = f"; the state could not be read ({err})"
            raise LabError(f"timed out after {timeout_s:.0f} s waiting for {what}{saw}")
        time.sleep(0.3)


@contextlib.contextmanager
def undone_on_failure(undo: Callable[[], None]) -> Iterator[None]:
    """Run undo when the block fails or is stopped (KeyboardInterrupt too), then re-raise."""
    try:
        yield
    except BaseException:
        undo()
        raise


@contextlib.contextmanager
def file_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock on directory/.lock, held for the block (one build at a time)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in path; empty when the file is missing or not JSON."""
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded


class RunDirState:
    """A lab's runtime directory: state.json (pids, commands, tokens) and one log per process."""

    run_dir: Path

    @property
    def state_path(self) -> Path:
        return self.run_dir / "state.json"

    def log_path(self, process: str) -> Path:
        return self.run_dir / "log" / f"{process}.log"

    def load_state(self) -> dict[str, Any]:
        return read_json(self.state_path)

    def save_state(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state, indent=2) + "\n")


def http_json(
    req: urllib.request.Request, timeout: float, context: ssl.SSLContext | None = None
) -> tuple[int, Any]:
    """Send req; (HTTP status, parsed JSON body or raw text), LabError when nothing answers."""
    try:
        # The labs build every URL themselves: http(s)://127.0.0.1:<port>/...
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except OSError as err:  # URLError, refused, timeout, certificate (ssl.SSLError)
        raise LabError(f"{req.get_method()} {req.full_url}: {err}") from None
    return status, json_or_text(raw)


def json_or_text(raw: bytes) -> Any:
    """An HTTP body, parsed as JSON, or its text when it is not JSON."""
    text = raw.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def pid_root(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/root")
    except OSError:
        return None


def pid_exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def pids_in_chroot(root: Path) -> list[int]:
    """Every process whose root directory is the chroot (daemons, slurmstepd, job steps)."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and pid_root(int(p.name)) == str(root)
    ]


def pid_alive(pid: int | None, root: Path) -> bool:
    return pid is not None and pid_root(pid) == str(root) and not is_zombie(pid)


def in_chroot(root: Path) -> Callable[[int], bool]:
    """The liveness test for processes of one lab: alive and rooted in its chroot."""
    return lambda pid: pid_alive(pid, root)


def reap(pid: int) -> None:
    """Collect a daemon this process started and stopped, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):  # not our child: PID 1 reaps it
        os.waitpid(pid, os.WNOHANG)


def stop_pids(pids: Sequence[int], running: Callable[[int], bool], grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after grace_s, each pid that `running` says is still ours."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [pid for pid in pids if running(pid)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while any(running(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in alive:
            reap(pid)


def port_free(host: str, port: int) -> None:
    """LabError when something else already listens where the lab wants to."""
    with socket.socket() as sock:
        # Without SO_REUSEADDR a port in TIME_WAIT from the previous lab would look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise LabError(f"{host}:{port} is in use by another program: {err}") from None


# --------------------------------------------------------------------------------------
# Mounts and trees
# --------------------------------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(prefix):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def unmount_under(root: Path) -> None:
    for point in mounts_under(root):
        if sh("umount", point, check=False).returncode != 0:
            # Last resort: detach, so a straggler cannot keep the lab half mounted.
            sh("umount", "--lazy", point, check=False)


def bind_mount(source: Path, target: Path, read_only: bool = False) -> None:
    sh("mount", "--bind", str(source), str(target))
    if read_only:
        sh("mount", "-o", "remount,bind,ro", str(target))


def remove_tree(path: Path) -> None:
    """Delete a chroot tree, never descending into something still mounted there."""
    unmount_under(path)
    if mounts_under(path):
        raise LabError(f"refusing to delete {path}: still mounted: {mounts_under(path)}")
    shutil.rmtree(path, ignore_errors=True)


def replace_tree(target: Path, build: Callable[[Path], None]) -> None:
    """Build a tree in a scratch directory beside target, then put it in target's place;
    a build that fails or is stopped leaves target as it was and no scratch behind."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    scratch.chmod(0o755)  # it becomes "/" for the users of the tree
    with undone_on_failure(lambda: remove_tree(scratch)):
        build(scratch)
        if target.exists():
            remove_tree(target)
        scratch.rename(target)


# --------------------------------------------------------------------------------------
# Debian roots
# --------------------------------------------------------------------------------------


def debian_mirror() -> str:
    """The first non-security mirror URI of the host's apt sources."""
    override = os.environ.get("HPCOPS_LAB_MIRROR")
    if override:
        return override
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith("#"):
                    fields[key.strip()] = value.strip()
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if uris and suites and not any(s.endswith("-security") for s in suites):
                return uris[0]
    sources_list = Path("/etc/apt/sources.list")
    if sources_list.exists():
        for line in sources_list.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[2]:
                return parts[1]
    raise LabError("no Debian mirror in the host's apt sources; set HPCOPS_LAB_MIRROR")


def debootstrap(
    suite: str,
    target: Path,
    log_path: Path,
    *,
    mirror: str,
    script: str | None = None,
    include: Sequence[str] = (),
    apt_conf: str = "99hpcops",
) -> None:
    """A minbase root of suite at target, ready for apt-get in a chroot: Release files past
    their Valid-Until date accepted, and no package script may start a daemon."""
    cmd = ["debootstrap", "--variant=minbase"]
    if include:
        cmd.append("--include=" + ",".join(include))
    cmd += [suite, str(target), mirror]
    if script:
        cmd.append(f"/usr/share/debootstrap/scripts/{script}")
    run_logged(cmd, log_path)
    # Mirrors of testing suites may serve a Release file past its Valid-Until date.
    (target / "etc/apt/apt.conf.d" / apt_conf).write_text('Acquire::Check-Valid-Until "false";\n')
    # Package scripts must not start daemons while the root is built.
    policy = target / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)


@contextlib.contextmanager
def proc_mounted(root: Path) -> Iterator[None]:
    """/proc inside root while package scripts run there: mariadb-server's postinst runs
    systemd-tmpfiles, which needs it."""
    sh("mount", "-t", "proc", "proc", str(root / "proc"))
    try:
        yield
    finally:
        sh("umount", str(root / "proc"))


def apt_install(root: Path, log_path: Path, packages: Sequence[str]) -> None:
    """apt-get update, install (without recommends) and clean, chrooted into root."""
    apt = ["chroot", str(root), "apt-get", "-q", "-y"]
    run_logged([*apt, "update"], log_path)
    run_logged([*apt, "install", "--no-install-recommends", *packages], log_path)
    run_logged([*apt, "clean"], log_path)


def chroot_user(root: Path, name: str) -> tuple[int, int]:
    """(uid, gid) of a user of the root's /etc/passwd."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(fields[3])
    raise LabError(f"user {name} does not exist in {root}")


# --------------------------------------------------------------------------------------
# Namespaces and chroots
# --------------------------------------------------------------------------------------

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]


def checked(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@dataclass(frozen=True)
class Mount:
    """One mount of a pod process: a source on the host (or a file system type) at a path."""

    target: str  # path inside the chroot
    source: str = ""  # host path for bind mounts
    fstype: str = ""  # proc, sysfs, tmpfs
    read_only: bool = False
    recursive: bool = False


def mount_in(root: Path, mount: Mount) -> None:
    path = root / mount.target.lstrip("/")
    if mount.fstype or Path(mount.source).is_dir():
        # Below an earlier mount of this pod (a tmpfs, a volume) the mount point is new.
        path.mkdir(parents=True, exist_ok=True)
    target = str(path).encode()
    if mount.fstype:
        flags = MS_RDONLY if mount.read_only else 0
        src = mount.fstype.encode()
        checked(LIBC.mount(src, target, src, flags, None), f"mount {mount.fstype}")
        return
    flags = MS_BIND | (MS_REC if mount.recursive else 0)
    checked(LIBC.mount(mount.source.encode(), target, None, flags, None), f"bind {mount.target}")
    if mount.read_only:
        checked(
            LIBC.mount(None, target, None, MS_BIND | MS_RDONLY | MS_REMOUNT, None),
            f"read-only {mount.target}",
        )


def chroot_setup(
    root: Path,
    netns: str | None = None,
    hostname: str | None = None,
    ids: tuple[int, int] | None = None,
    mounts: Sequence[Mount] = (),
) -> Callable[[], None]:
    """A preexec function: enter a network namespace, own UTS namespace, with mounts a
    private mount namespace holding them, chroot, drop to a user."""

    def setup() -> None:
        if netns:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            checked(LIBC.setns(fd, CLONE_NEWNET), "setns")
            os.close(fd)
        if hostname or mounts:
            flags = (CLONE_NEWUTS if hostname else 0) | (CLONE_NEWNS if mounts else 0)
            checked(LIBC.unshare(flags), "unshare")
        if mounts:
            # Nothing mounted here may show in the host's namespace (or other processes').
            checked(LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make-rprivate")
            for mount in mounts:
                mount_in(root, mount)
        if hostname:
            socket.sethostname(hostname)
        os.chroot(root)
        os.chdir("/")
        if ids:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])

    return setup


def add_bridge(name: str, address: str) -> None:
    """A bridge with address/24 on the host, up."""
    sh("ip", "link", "add", name, "type", "bridge")
    sh("ip", "addr", "add", f"{address}/24", "dev", name)
    sh("ip", "link", "set", name, "up")


def add_netns_on_bridge(name: str, bridge: str, address: str) -> None:
    """A network namespace whose eth0 (address/24) is a veth into bridge; the host end of
    the veth pair is called like the namespace."""
    sh("ip", "netns", "add", name)
    sh("ip", "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name)
    sh("ip", "link", "set", name, "master", bridge, "up")
    for cmd in (
        ("ip", "addr", "add", f"{address}/24", "dev", "eth0"),
        ("ip", "link", "set", "eth0", "up"),
        ("ip", "link", "set", "lo", "up"),
    ):
        sh("ip", "netns", "exec", name, *cmd)


def netns_with_prefix(prefix: str) -> list[str]:
    """Network namespaces whose name starts with prefix."""
    names = sh("ip", "netns", "list").stdout.split("\n")
    return [line.split()[0] for line in names if line.startswith(prefix)]


def links_with_prefix(prefix: str) -> list[str]:
    """Host network interfaces whose name starts with prefix (bridges, veth ends)."""
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix))


def remove_network(netns: Sequence[str], links: Sequence[str]) -> None:
    """Delete namespaces (their veth pairs go with them), then the links left (bridges)."""
    for name in netns:
        sh("ip", "netns", "delete", name, check=False)
    for link in links:
        sh("ip", "link", "delete", link, check=False)


# --------------------------------------------------------------------------------------
# The lab's command-line scripts
# --------------------------------------------------------------------------------------

CLI_ERRORS: tuple[type[BaseException], ...] = (LabError, OSError, subprocess.SubprocessError)


def run_cli(
    prog: str, action: Callable[[], int], errors: tuple[type[BaseException], ...] = CLI_ERRORS
) -> int:
    """action's exit code; for one of errors, `prog: error` on stderr and 1."""
    try:
        return action()
    except errors as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1


def health(report: dict[str, Any]) -> str:
    """healthy, DEGRADED or down, from a lab status report's `healthy` and `up`."""
    return "healthy" if report["healthy"] else ("DEGRADED" if report["up"] else "down")


def print_env(values: dict[str, str], args: argparse.Namespace) -> None:
    """values as JSON (--json) or as shell `export` lines."""
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for key, value in values.items():
            print(f"export {key}='{value}'")
