# SPDX-License-Identifier: GPL-3.0-or-later
"""Real Slurm clusters for the hpcops.slinky tests, one per Slurm release.

Each release runs from a Debian chroot (forky for Slurm 26.05, trixie for 24.11) that is
built once with debootstrap and cached outside the repository.  ``up`` starts, per release:

* slurmctld in the host network namespace, bound to the address of a bridge the lab creates
  (``198.18.26.1`` for 26.05, ``198.18.24.1`` for 24.11; RFC 2544 benchmarking range);
* three slurmd nodes ``cpu01``..``cpu03``, each in its own network namespace and UTS
  namespace (so ``hostname`` in a job prints the node name), joined to the bridge by a veth
  pair (``198.18.X.11``..``13``);
* slurmrestd on ``127.0.0.1`` (26.05: port 16820, 24.11: port 26820) with
  ``-a rest_auth/jwt -s openapi/slurmctld``, run as the unprivileged chroot user ``slurmrest``.

Authentication is ``auth/slurm`` with a random ``slurm.key`` (no munge) plus ``auth/jwt``
with a random HS256 key; both are generated at ``up`` under the runtime directory
(``$HPCOPS_LAB_RUN``, default ``/run/hpcops-lab``), never inside the repository.

Dynamic nodes (26.05): the cluster allows ``MaxNodeCount=64``, both partitions use
``Nodes=ALL`` and slurmctld runs with ``enable_configless``, so a node started as
``slurmd -Z --conf-server 198.18.26.1:16817 --conf "RealMemory=4096 Features=dyn"``
from a network namespace on the lab bridge registers itself and joins ``batch`` and
``backfill``.  ``SlurmLab.add_dynamic_node(name)`` does exactly that (address ``.100`` and
up); ``SlurmLab.remove_dynamic_node(name)`` stops that slurmd, deletes the node with
``scontrol delete nodename=<name>`` and removes its namespace.  A later Kubernetes lab can
start such nodes itself; everything in a namespace whose name starts with the cluster's
prefix (``hpl2605-``) and every process whose root is the chroot is cleaned up by ``down``.

CLI::

    python3 tests/lab/slurm_lab.py {up,down,status,env,token} [--release 26.05|24.11|all]

Python API (used by the integration tests)::

    lab = SlurmLab("26.05")
    lab.up()
    lab.request("GET", "/slurm/v0.0.44/ping", user="root")
    lab.run(["sbatch", "--wrap", "sleep 1"], user="alice")
    lab.down()
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbox import (
    CACHE_DIR,
    RUN_DIR,
    LabError,
    RunDirState,
    add_bridge,
    add_netns_on_bridge,
    apt_install,
    bind_mount,
    chroot_setup,
    chroot_user,
    debian_mirror,
    debootstrap,
    file_lock,
    health,
    http_json,
    in_chroot,
    links_with_prefix,
    logger,
    mounts_under,
    netns_with_prefix,
    pid_alive,
    pids_in_chroot,
    port_free,
    print_env,
    proc_mounted,
    remove_network,
    replace_tree,
    run_cli,
    run_logged,
    sh,
    stop_pids,
    undone_on_failure,
    unmount_under,
    wait_until,
)

CHROOT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurm-client",
    "slurm-wlm-jwt-plugin",
    # Accounting: slurmdbd on Debian's MariaDB, as a site runs it.
    "slurmdbd",
    "slurm-wlm-mysql-plugin",
    "mariadb-server",
)
# Dedicated slurmrestd user, then two ordinary users for job-ownership and MCS tests.
REST_USER = "slurmrest"
JOB_USERS = {"alice": 2001, "bob": 2002}
# Bump when the chroot recipe changes so cached chroots are rebuilt.
CHROOT_RECIPE = 1
STAMP_PATH = "etc/hpcops-lab-stamp.json"

# Paths as seen inside the chroot; the runtime directory is bind-mounted there.
IN_RUN = "/run/hpcops-lab"
IN_ETC = "/etc/slurm"
CHROOT_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Working directory of lab jobs: the chroot's /tmp, a tmpfs that lives as long as the lab.
JOB_DIR = "/tmp"

STATIC_NODES = ("cpu01", "cpu02", "cpu03")
STATIC_NODE_LIST = "cpu[01-03]"  # STATIC_NODES as a Slurm host list
FIRST_NODE_HOST = 11
FIRST_DYNAMIC_HOST = 100
# Lab nodes share one machine; cap what each claims so the numbers stay readable.
MAX_NODE_MEMORY_MB = 4096
UP_DEADLINE_S = 90.0

EXIT_DOWN = 3
EXIT_DEGRADED = 1


@dataclass(frozen=True)
class Release:
    name: str
    suite: str
    debootstrap_script: str | None
    subnet: str
    # slurmctld listens on port_base + 17, slurmd on + 18, slurmrestd on + 20 (Slurm's
    # own 6817, 6818 and 6820 for port_base 6800).
    port_base: int
    dynamic_nodes: bool
    # What its slurmrestd offers, measured with GET /openapi/v3 (forky 26.05.5, trixie 24.11.5).
    api_versions: tuple[str, ...]
    # Node records without a slurmd (State=CLOUD), for benchmarks at a site's scale.
    scale_nodes: int = 0
    max_job_count: int = 10000
    # Whether tests and `--release all` use it; the scale cluster is for benchmarks only.
    in_test_matrix: bool = True
    # slurmdbd on a MariaDB of the lab's own, with enforced associations and fair share.
    accounting: bool = True

    @property
    def ctld_port(self) -> int:
        return self.port_base + 17

    @property
    def slurmd_port(self) -> int:
        return self.port_base + 18

    @property
    def rest_port(self) -> int:
        return self.port_base + 20

    @property
    def dbd_port(self) -> int:
        return self.port_base + 19

    @property
    def mariadb_port(self) -> int:
        return self.port_base + 6

    @property
    def tag(self) -> str:
        return self.name.replace(".", "")

    @property
    def cluster(self) -> str:
        return f"lab{self.tag}"

    @property
    def prefix(self) -> str:
        """Prefix of the bridge, namespaces and veths; short enough for IFNAMSIZ."""
        return f"hpl{self.tag}"

    def address(self, host: int) -> str:
        return f"{self.subnet}.{host}"


SLURM_2605 = Release(
    name="26.05",
    suite="forky",
    # The host's debootstrap has no forky script; sid's works for it.
    debootstrap_script="sid",
    subnet="198.18.26",
    port_base=16800,
    dynamic_nodes=True,
    api_versions=("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
)
RELEASES: dict[str, Release] = {
    "26.05": SLURM_2605,
    "24.11": Release(
        name="24.11",
        suite="trixie",
        debootstrap_script=None,
        subnet="198.18.24",
        port_base=26800,
        dynamic_nodes=False,
        api_versions=("v0.0.40", "v0.0.41", "v0.0.42"),
    ),
    # Slurm 26.05 with 2,000 extra node records and room for 20,000 jobs (benchmarks/).
    "scale": dataclasses.replace(
        SLURM_2605,
        name="scale",
        subnet="198.18.27",
        port_base=17800,
        dynamic_nodes=False,
        scale_nodes=2000,
        max_job_count=20000,
        in_test_matrix=False,
        # Its 20,000 jobs measure slurmctld and slurmrestd, not the database.
        accounting=False,
    ),
}
TEST_RELEASES = [name for name, release in RELEASES.items() if release.in_test_matrix]

log = logger("slurm-lab")


# --------------------------------------------------------------------------------------
# Chroot
# --------------------------------------------------------------------------------------


def wanted_stamp(release: Release) -> dict[str, Any]:
    return {
        "recipe": CHROOT_RECIPE,
        "suite": release.suite,
        "packages": list(CHROOT_PACKAGES),
        "users": [REST_USER, *JOB_USERS],
    }


def chroot_is_current(root: Path, release: Release) -> bool:
    try:
        stamp = json.loads((root / STAMP_PATH).read_text())
    except (OSError, ValueError):
        return False
    return all(stamp.get(key) == value for key, value in wanted_stamp(release).items())


def chroot_path(release: Release) -> Path:
    # Each cluster that may run beside another needs a chroot of its own: `down` stops
    # every process rooted in its chroot.
    name = release.suite if release.in_test_matrix else f"{release.suite}-{release.name}"
    return CACHE_DIR / "chroot" / name


def ensure_chroot(release: Release) -> Path:
    """Return the release's chroot, building it when missing or built from another recipe."""
    root = chroot_path(release)
    if chroot_is_current(root, release):
        return root
    # Two processes may want it at once (`make demo` builds the lab in the background while
    # `k8s_lab.py up` runs): the second waits, then finds it built.
    with file_lock(root.parent):
        if chroot_is_current(root, release):
            return root
        build_chroot_in_place(root, release)
    return root


def build_chroot_in_place(root: Path, release: Release) -> None:
    """Build the chroot beside root and put it there: a copy of a current sibling of the
    same suite, or debootstrap."""
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is missing: run `apt-get install debootstrap` (as root)")
    log(f"preparing the {release.suite} chroot for Slurm {release.name} (up to 1 min)...")
    started = time.monotonic()
    root.parent.mkdir(parents=True, exist_ok=True)
    sibling = root.parent / release.suite

    def build(build_dir: Path) -> None:
        if sibling != root and chroot_is_current(sibling, release):
            # Same suite and recipe: a copy takes seconds, debootstrap a minute. A running lab
            # has proc, sysfs and tmpfs mounted in it; --one-file-system leaves those out.
            log(f"copying {sibling} to {root}")
            sh("cp", "-a", "--one-file-system", "--reflink=auto", f"{sibling}/.", str(build_dir))
            # Bind mounts from the same file system came along (a running lab's keys in
            # /etc/slurm): what shows at the sibling's mount points is not the chroot's.
            for point in mounts_under(sibling):
                copied = build_dir / Path(point).relative_to(sibling)
                if copied.is_dir() and not copied.is_symlink():
                    for child in copied.iterdir():
                        if child.is_dir() and not child.is_symlink():
                            shutil.rmtree(child)
                        else:
                            child.unlink()
                elif copied.is_file():
                    copied.write_bytes(b"")
        else:
            build_chroot(build_dir, release)

    replace_tree(root, build)
    log(f"{release.suite} chroot ready in {time.monotonic() - started:.0f} s: {root}")


def build_chroot(target: Path, release: Release) -> None:
    mirror = debian_mirror()
    build_log = target.parent / f"{release.suite}.build.log"
    build_log.unlink(missing_ok=True)
    log(f"  debootstrap {release.suite} from {mirror} (log: {build_log})")
    debootstrap(
        release.suite,
        target,
        build_log,
        mirror=mirror,
        script=release.debootstrap_script,
        apt_conf="99hpcops-lab",
    )
    log(f"  installing {' '.join(CHROOT_PACKAGES)}")
    with proc_mounted(target):
        apt_install(target, build_log, CHROOT_PACKAGES)

    useradd = ["chroot", str(target), "useradd", "--user-group", "--shell", "/bin/sh"]
    run_logged([*useradd, "--system", "--no-create-home", REST_USER], build_log)
    for user, uid in JOB_USERS.items():
        run_logged([*useradd, "--create-home", "--uid", str(uid), user], build_log)
    # minbase has no /etc/hosts; the lab bind-mounts its own there.
    (target / "etc/hosts").touch()

    versions = subprocess.run(
        [
            "chroot",
            str(target),
            "dpkg-query",
            "-W",
            "-f",
            "${Package} ${Version}\n",
            *CHROOT_PACKAGES,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stamp = {
        **wanted_stamp(release),
        "installed": dict(line.split() for line in versions.splitlines()),
        "mirror": mirror,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (target / STAMP_PATH).write_text(json.dumps(stamp, indent=2) + "\n")


# --------------------------------------------------------------------------------------
# Mounts, namespaces, processes
# --------------------------------------------------------------------------------------


def lab_netns(release: Release) -> list[str]:
    """The network namespaces of the release's cluster."""
    return netns_with_prefix(f"{release.prefix}-")


def lab_links(release: Release) -> list[str]:
    """The lab's bridge and the host ends of its veth pairs."""
    return links_with_prefix(release.prefix)


def remove_lab_network(release: Release) -> None:
    """Every namespace, veth and bridge of the release's cluster."""
    remove_network(lab_netns(release), lab_links(release))


def lab_leftovers(root: Path, release: Release, **more: list[Any]) -> dict[str, list[Any]]:
    """What still runs in the chroot and what is left of the cluster's network (and more);
    only what is not empty."""
    found: dict[str, list[Any]] = {
        "processes": pids_in_chroot(root),
        **more,
        "netns": lab_netns(release),
        "links": lab_links(release),
    }
    return {key: value for key, value in found.items() if value}


# --------------------------------------------------------------------------------------
# The lab's own JWTs and REST calls: an oracle independent of the collection's client
# (plugins/module_utils/_slurm/rest.py), so a test never checks that client with itself.
# --------------------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def lab_jwt(key: bytes, user: str, lifespan_s: int = 600) -> str:
    """An HS256 JWT as Slurm's auth/jwt expects: claims sun, iat, exp; raw key bytes as secret."""
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64url(
        json.dumps(
            {"sun": user, "iat": now, "exp": now + lifespan_s}, separators=(",", ":")
        ).encode()
    )
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64url(signature)}"


def ping_responding(ping: dict[str, Any]) -> bool:
    """v0.0.42+ answer "responding"; older parsers only "pinged" (dropped in v0.0.45)."""
    return ping.get("responding", ping.get("pinged") == "UP") is True


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


def node_hardware(root: Path) -> str:
    """CPU topology and memory from `slurmd -C`, memory capped for the shared host."""
    proc = subprocess.run(
        ["slurmd", "-C"],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=chroot_setup(root),
        env={"PATH": CHROOT_ENV_PATH},
    )
    if proc.returncode != 0:
        raise LabError(f"slurmd -C in {root} failed: {proc.stderr.strip()}")
    fields = dict(item.split("=", 1) for item in proc.stdout.split()[1:] if "=" in item)
    fields.pop("UpTime", None)
    fields["RealMemory"] = str(min(int(fields["RealMemory"]), MAX_NODE_MEMORY_MB))
    return " ".join(f"{key}={value}" for key, value in fields.items())


def slurm_conf(release: Release, hardware: str) -> str:
    # Dynamic nodes fetch their configuration from slurmctld (configless), like Slinky's.
    dynamic = "MaxNodeCount=64\n" if release.dynamic_nodes else ""
    # Records only: no slurmd answers for them, and CLOUD keeps slurmctld from pinging them.
    scale = (
        f"NodeName=scale[0001-{release.scale_nodes:04d}] CPUs=2 RealMemory=1000 State=CLOUD\n"
        if release.scale_nodes
        else ""
    )
    configless = "SlurmctldParameters=enable_configless\n" if release.dynamic_nodes else ""
    return f"""\
# slurm.conf of the hpcops.slinky test lab, Slurm {release.name}; written by tests/lab/slurm_lab.py.
ClusterName={release.cluster}
SlurmctldHost={release.prefix}-ctl({release.address(1)})
SlurmctldPort={release.ctld_port}
SlurmdPort={release.slurmd_port}
SlurmUser=slurm
SlurmdUser=root
# slurmctld binds to the bridge address, not to every address of the host (slurmd runs in
# its own network namespace, where binding to any address is harmless).
CommunicationParameters=NoCtldInAddrAny
{configless}
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={IN_ETC}/jwt_hs256.key

StateSaveLocation={IN_RUN}/state
SlurmdSpoolDir={IN_RUN}/spool/%n
SlurmctldPidFile={IN_RUN}/pid/slurmctld.pid
SlurmdPidFile={IN_RUN}/pid/slurmd-%n.pid
SlurmctldLogFile={IN_RUN}/log/slurmctld.log
SlurmdLogFile={IN_RUN}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

# The host mounts cgroups in hybrid mode: no cgroup enforcement in the lab.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Jobs that ask for no memory get a little, so several share a node as on a real site.
DefMemPerCPU=256
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
MCSPlugin=mcs/label
MCSParameters=enforced,select
ReturnToService=1
KillWait=5
MailProg=/bin/true
# Dynamic nodes register straight with slurmctld; no message forwarding through peers.
TreeWidth=65533
{dynamic}
MaxJobCount={release.max_job_count}
{accounting_conf(release)}NodeName={STATIC_NODE_LIST} {hardware} State=UNKNOWN
{scale}PartitionName=batch Nodes=ALL Default=YES PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
PartitionName=backfill Nodes=ALL PriorityTier=1 PreemptMode=REQUEUE MaxTime=04:00:00 \
GraceTime=30 State=UP
"""


CGROUP_CONF = "# No cgroup enforcement in the lab (hybrid cgroup host).\nCgroupPlugin=disabled\n"

# The account every job user submits under (associations are enforced).
LAB_ACCOUNT = "lab"
ACCT_DB = "slurm_acct_db"
ACCT_DB_USER = "slurm"


def accounting_conf(release: Release) -> str:
    """The slurm.conf lines for slurmdbd, as a site with accounting writes them."""
    if not release.accounting:
        return "# No accounting in this cluster.\n"
    return f"""\
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={release.prefix}-ctl
AccountingStoragePort={release.dbd_port}
# A job runs only under an association, within its limits and its QoS's.
AccountingStorageEnforce=associations,limits,qos,safe
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightAge=1000
"""


def slurmdbd_conf(release: Release, db_password: str) -> str:
    """slurmdbd.conf: JWTs of the same key as slurmctld's (slurmrestd's /slurmdb/ API passes
    the caller's token on), the lab's MariaDB over TCP."""
    return f"""\
# slurmdbd.conf of the hpcops.slinky test lab, Slurm {release.name}; written by tests/lab/slurm_lab.py.
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={IN_ETC}/jwt_hs256.key
DbdHost={release.prefix}-ctl
DbdAddr={release.address(1)}
DbdPort={release.dbd_port}
SlurmUser=slurm
PidFile={IN_RUN}/pid/slurmdbd.pid
LogFile={IN_RUN}/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={release.mariadb_port}
StorageUser={ACCT_DB_USER}
StoragePass={db_password}
StorageLoc={ACCT_DB}
"""


def mariadbd_argv(data: str, address: str, port: int) -> list[str]:
    """mariadbd with its data in `data`, on address:port, with the settings Slurm's
    accounting guide asks for, sized for a lab (the guide's buffer pool is for a site's years
    of jobs: slurmdbd logs that it is small). Snapshot isolation, on by default since
    MariaDB 11.8, makes slurmdbd fatal on a write conflict (slurmdbd says so itself at
    start). Its log goes to stderr, which the caller keeps."""
    return [
        "mariadbd",
        "--no-defaults",
        f"--datadir={data}",
        f"--socket={data}/mariadbd.sock",
        f"--pid-file={data}/mariadbd.pid",
        f"--bind-address={address}",
        f"--port={port}",
        "--skip-name-resolve",
        "--innodb-snapshot-isolation=OFF",
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=64M",
        "--innodb-lock-wait-timeout=900",
        "--max-allowed-packet=16M",
    ]


def mariadb_command(release: Release) -> list[str]:
    """The Slurm lab's mariadbd, on 127.0.0.1 (its log in log/mariadbd.out)."""
    return mariadbd_argv(f"{IN_RUN}/mariadb", "127.0.0.1", release.mariadb_port)


def hosts_file(release: Release) -> str:
    lines = [Path("/etc/hosts").read_text().rstrip("\n"), f"# hpcops lab {release.cluster}"]
    lines.append(f"{release.address(1)}\t{release.prefix}-ctl")
    for index, node in enumerate(STATIC_NODES):
        lines.append(f"{release.address(FIRST_NODE_HOST + index)}\t{node}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# The lab
# --------------------------------------------------------------------------------------


class LabRestOracle:
    """The lab's own HTTP calls to one slurmrestd, with JWTs the caller mints (`url` and
    `token` come from the class using it).  Deliberately not the collection's client
    (plugins/module_utils/_slurm/rest.py): tests read Slurm's state through this one."""

    url: str

    def token(self, user: str = "root", lifespan: int = 600) -> str:
        raise NotImplementedError

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str = "root",
        token: str | None = None,
        auth: bool = True,
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """Call slurmrestd as user with a fresh token (or the given one, or none without auth).

        Returns (HTTP status, parsed JSON body or raw text).
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310
        if auth:
            req.add_header("X-SLURM-USER-NAME", user)
            req.add_header("X-SLURM-USER-TOKEN", token if token is not None else self.token(user))
        if data is not None:
            req.add_header("Content-Type", "application/json")
        return http_json(req, timeout)


class SlurmLab(RunDirState, LabRestOracle):
    """One Slurm cluster of one release; see the module docstring."""

    def __init__(self, release: str) -> None:
        if release not in RELEASES:
            raise LabError(f"unknown release {release!r}; known: {', '.join(RELEASES)}")
        self.release = RELEASES[release]
        self.root = chroot_path(self.release)
        self.run_dir = RUN_DIR / f"slurm-{release}"
        self.url = f"http://127.0.0.1:{self.release.rest_port}"
        self.conf_server = f"{self.release.address(1)}:{self.release.ctld_port}"
        self.node_names = list(STATIC_NODES)

    # ---- paths and state -------------------------------------------------------------

    @property
    def jwt_key_path(self) -> Path:
        return self.run_dir / "etc/jwt_hs256.key"

    def record_pid(self, name: str, pid: int) -> None:
        state = self.load_state()
        state.setdefault("pids", {})[name] = pid
        self.save_state(state)

    # ---- REST ------------------------------------------------------------------------

    def token(self, user: str = "root", lifespan: int = 600) -> str:
        try:
            key = self.jwt_key_path.read_bytes()
        except OSError:
            raise LabError(
                f"Slurm {self.release.name} lab is not up (no {self.jwt_key_path})"
            ) from None
        return lab_jwt(key, user, lifespan)

    def openapi_spec(self) -> dict[str, Any]:
        status, spec = self.request("GET", "/openapi/v3")
        if status != 200 or not isinstance(spec, dict):
            raise LabError(f"GET /openapi/v3 answered {status}")
        return spec

    def api_versions(self, spec: dict[str, Any] | None = None) -> list[str]:
        """The /slurm/vX.Y.Z API versions slurmrestd serves, oldest first."""
        spec = spec or self.openapi_spec()
        parsers = spec.get("info", {}).get("x-slurm", {}).get("data_parsers", [])
        names = [p.get("plugin", "") if isinstance(p, dict) else str(p) for p in parsers]
        versions = {name.rsplit("/", 1)[-1] for name in names if "v0.0." in name}
        if not versions:  # releases before 25.05 do not describe their parsers
            versions = {
                m.group(1)
                for p in spec.get("paths", {})
                if (m := re.match(r"/slurm/(v[\d.]+)/", p))
            }
        return sorted(versions, key=lambda v: [int(x) for x in v[1:].split(".")])

    def latest_api(self) -> str:
        versions = self.load_state().get("api_versions")
        if not versions:
            raise LabError(f"Slurm {self.release.name} lab is not up")
        return str(versions[-1])

    def ping_ok(self) -> bool:
        try:
            status, body = self.request("GET", f"/slurm/{self.latest_api()}/ping", timeout=5)
        except LabError:
            return False
        pings = body.get("pings", []) if isinstance(body, dict) else []
        return status == 200 and bool(pings) and ping_responding(pings[0])

    def get(self, path: str) -> dict[str, Any]:
        """GET /slurm/<latest API>/<path> as root; the body, or LabError unless HTTP 200."""
        status, body = self.request("GET", f"/slurm/{self.latest_api()}/{path}")
        if status != 200 or not isinstance(body, dict):
            raise LabError(f"GET {path} answered {status}: {body}")
        return body

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.get(f"node/{name}")["nodes"][0]
        return node

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.get(f"job/{job_id}")["jobs"][0]
        return job

    def node_states(self) -> dict[str, list[str]]:
        return {node["name"]: node["state"] for node in self.get("nodes")["nodes"]}

    def submit_job(self, script: str, *, user: str = "alice", **fields: Any) -> int:
        """POST job/submit as user: a shell script in JOB_DIR, partition batch unless given."""
        desc = {
            "name": "hpcops-lab",
            "partition": "batch",
            "current_working_directory": JOB_DIR,
            "environment": ["PATH=/usr/bin:/bin"],
            "script": f"#!/bin/sh\n{script}\n",
            **fields,
        }
        path = f"/slurm/{self.latest_api()}/job/submit"
        status, body = self.request("POST", path, {"job": desc}, user=user)
        if status != 200 or not isinstance(body, dict) or body.get("errors"):
            raise LabError(f"job submit as {user} answered {status}: {body}")
        return int(body["job_id"])

    # ---- commands in the chroot ------------------------------------------------------

    def run(
        self,
        cmd: Sequence[str],
        *,
        user: str | None = None,
        check: bool = False,
        input: str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (scontrol, sbatch, ...) inside the chroot, as root or as user."""
        name = user or "root"
        ids = chroot_user(self.root, name) if user else None
        home = "/root" if name == "root" else f"/home/{name}"
        env = {"PATH": CHROOT_ENV_PATH, "HOME": home, "USER": name, "LOGNAME": name, "LC_ALL": "C"}
        proc = subprocess.run(
            list(cmd),
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
            preexec_fn=chroot_setup(self.root, ids=ids),
        )
        if check and proc.returncode != 0:
            raise LabError(
                f"{' '.join(cmd)} as {name} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def start_daemon(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        netns: str | None = None,
        hostname: str | None = None,
        user: str | None = None,
        env: dict[str, str] | None = None,
    ) -> int:
        """Start a foreground daemon in the chroot, output to log/<name>.out; return its pid."""
        ids = chroot_user(self.root, user) if user else None
        with (self.run_dir / "log" / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={"PATH": CHROOT_ENV_PATH, "LC_ALL": "C", **(env or {})},
                start_new_session=True,
                # The lab runs no threads, so a preexec function is safe here.
                preexec_fn=chroot_setup(  # noqa: PLW1509
                    self.root, netns=netns, hostname=hostname, ids=ids
                ),
            )
        self.record_pid(name, proc.pid)
        return proc.pid

    # ---- up --------------------------------------------------------------------------

    def up(self) -> None:
        """Start the cluster, or reuse it when it is already up and healthy."""
        if not chroot_is_current(self.root, self.release):
            self.down(quiet=True)  # nothing may run in or be mounted into a chroot being replaced
            ensure_chroot(self.release)
        if self.is_healthy() and self.config_is_current():
            log(f"Slurm {self.release.name} lab already up at {self.url}")
            return
        if self.load_state() or mounts_under(self.root) or lab_netns(self.release):
            log(
                f"Slurm {self.release.name} lab is partially up or its configuration changed: restarting it"
            )
            self.down()
        port_free("127.0.0.1", self.release.rest_port)
        started = time.monotonic()
        log(f"starting Slurm {self.release.name} lab ({self.release.cluster})...")
        with undone_on_failure(lambda: self.down(quiet=True)):
            self.prepare_run_dir()
            self.mount()
            self.create_network()
            self.start_cluster()
            self.wait_ready(UP_DEADLINE_S)
        log(f"Slurm {self.release.name} lab up in {time.monotonic() - started:.1f} s at {self.url}")

    def config_is_current(self) -> bool:
        """Whether the running cluster uses the slurm.conf this version of the lab writes."""
        try:
            running = (self.run_dir / "etc" / "slurm.conf").read_text()
        except OSError:
            return False
        return running == slurm_conf(self.release, node_hardware(self.root))

    def prepare_run_dir(self) -> None:
        """Fresh runtime directory: config, keys, empty state and logs."""
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        slurm_uid, slurm_gid = chroot_user(self.root, "slurm")
        for sub in ("etc", "log", "state", "pid", *(f"spool/{node}" for node in STATIC_NODES)):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("log", "state"):
            os.chown(self.run_dir / sub, slurm_uid, slurm_gid)
        etc = self.run_dir / "etc"
        (etc / "slurm.conf").write_text(slurm_conf(self.release, node_hardware(self.root)))
        (etc / "cgroup.conf").write_text(CGROUP_CONF)
        for key_name, size in (("slurm.key", 32), ("jwt_hs256.key", 32)):
            key_path = etc / key_name
            key_path.write_bytes(secrets.token_bytes(size))
            key_path.chmod(0o600)
            os.chown(key_path, slurm_uid, slurm_gid)
        (self.run_dir / "hosts").write_text(hosts_file(self.release))
        if self.release.accounting:
            dbd_conf = etc / "slurmdbd.conf"
            dbd_conf.touch(mode=0o600)
            os.chown(dbd_conf, slurm_uid, slurm_gid)
            dbd_conf.write_text(slurmdbd_conf(self.release, secrets.token_urlsafe(24)))
            (self.run_dir / "mariadb").mkdir()
            os.chown(self.run_dir / "mariadb", *chroot_user(self.root, "mysql"))
        self.save_state(
            {
                "release": self.release.name,
                "cluster": self.release.cluster,
                "chroot": str(self.root),
                "url": self.url,
                "conf_server": self.conf_server,
                "jwt_key": str(self.jwt_key_path),
                "bridge": self.release.prefix,
                "pids": {},
            }
        )

    def mount(self) -> None:
        sh("mount", "-t", "proc", "proc", str(self.root / "proc"))
        sh("mount", "-t", "sysfs", "-o", "ro", "sysfs", str(self.root / "sys"))
        # Scratch space of daemons and jobs lives only while the lab is up, not in the cache.
        sh("mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(self.root / "tmp"))
        sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", str(self.root / "run"))
        (self.root / IN_RUN.lstrip("/")).mkdir()
        if self.release.accounting:
            # slurmdbd makes its run directory after it gave up root; systemd would make it.
            dbd_run = self.root / "run/slurmdbd"
            dbd_run.mkdir()
            os.chown(dbd_run, *chroot_user(self.root, "slurm"))
        bind_mount(self.run_dir, self.root / IN_RUN.lstrip("/"))
        bind_mount(self.run_dir / "etc", self.root / IN_ETC.lstrip("/"))
        bind_mount(self.run_dir / "hosts", self.root / "etc/hosts", read_only=True)

    def create_network(self) -> None:
        add_bridge(self.release.prefix, self.release.address(1))
        for index, node in enumerate(STATIC_NODES):
            self.create_node_netns(node, FIRST_NODE_HOST + index)

    def create_node_netns(self, node: str, host: int) -> str:
        """A network namespace with one veth into the lab bridge; returns its name."""
        name = f"{self.release.prefix}-{node}"
        add_netns_on_bridge(name, self.release.prefix, self.release.address(host))
        return name

    def start_accounting(self) -> None:
        """MariaDB, its database user, slurmdbd, then the cluster, the lab account and its
        users; before slurmctld, which then registers with a slurmdbd that answers."""
        started = time.monotonic()
        data = f"{IN_RUN}/mariadb"
        self.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=mysql",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            check=True,
            timeout=120,
        )
        self.start_daemon("mariadbd", mariadb_command(self.release), user="mysql")
        self.wait_for_port("127.0.0.1", self.release.mariadb_port, "mariadbd")
        conf = (self.run_dir / "etc/slurmdbd.conf").read_text()
        password = re.search(r"^StoragePass=(.*)$", conf, re.MULTILINE)
        if password is None:
            raise LabError("slurmdbd.conf has no StoragePass")
        # Over stdin: a password in argv would show in the host's process list.
        self.run(
            ["mariadb", "--no-defaults", f"--socket={data}/mariadbd.sock", "--user=root"],
            input=(
                f"CREATE USER '{ACCT_DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password.group(1)}';\n"
                f"GRANT ALL ON {ACCT_DB}.* TO '{ACCT_DB_USER}'@'127.0.0.1';\n"
                # Made here, as Slurm's guide does: a slurmdbd that creates it itself connects
                # again on the same handle, and libmariadb 3.4 (MariaDB 11.8) then fails its
                # next query (error 5027, measured with 24.11 and 26.05).
                f"CREATE DATABASE {ACCT_DB};\n"
            ),
            check=True,
        )
        self.start_slurmdbd()
        cluster = self.release.cluster
        self.sacctmgr("add", "cluster", cluster)
        self.sacctmgr(
            "add",
            "account",
            LAB_ACCOUNT,
            f"cluster={cluster}",
            "description=hpcops lab jobs",
            "organization=hpcops",
        )
        self.sacctmgr(
            "add", "user", ",".join(JOB_USERS), f"account={LAB_ACCOUNT}", f"cluster={cluster}"
        )
        log(f"  slurmdbd and MariaDB up in {time.monotonic() - started:.1f} s")

    def start_slurmdbd(self) -> None:
        """Start slurmdbd (again, after stop_slurmdbd) and wait until it listens."""
        self.start_daemon("slurmdbd", ["slurmdbd", "-D"], hostname=f"{self.release.prefix}-ctl")
        self.wait_for_port(self.release.address(1), self.release.dbd_port, "slurmdbd")

    def stop_slurmdbd(self) -> None:
        """Stop slurmdbd alone, as an outage of accounting: slurmctld keeps running."""
        state = self.load_state()
        pid = state.get("pids", {}).pop("slurmdbd", None)
        self.save_state(state)
        if pid:
            stop_pids([pid], in_chroot(self.root))

    def sacctmgr(self, *args: str) -> str:
        """`sacctmgr -i` as root in the chroot; its output."""
        return self.run(["sacctmgr", "-i", *args], check=True).stdout

    def start_cluster(self) -> None:
        if self.release.accounting:
            self.start_accounting()
        self.start_daemon("slurmctld", ["slurmctld", "-D"], hostname=f"{self.release.prefix}-ctl")
        self.wait_for_port(self.release.address(1), self.release.ctld_port, "slurmctld")
        for node in STATIC_NODES:
            self.start_daemon(
                f"slurmd-{node}",
                ["slurmd", "-D", "-N", node],
                netns=f"{self.release.prefix}-{node}",
                hostname=node,
            )
        self.start_daemon(
            "slurmrestd",
            [
                "slurmrestd",
                "-a",
                "rest_auth/jwt",
                "-s",
                "openapi/slurmctld,openapi/slurmdbd"
                if self.release.accounting
                else "openapi/slurmctld",
                f"127.0.0.1:{self.release.rest_port}",
            ],
            user=REST_USER,
            env={"SLURM_JWT": "daemon"},
        )
        self.wait_for_port("127.0.0.1", self.release.rest_port, "slurmrestd")
        state = self.load_state()
        state["api_versions"] = self.api_versions()
        self.save_state(state)

    def wait_for_port(self, host: str, port: int, daemon: str) -> None:
        def listening() -> bool:
            if not pid_alive(self.load_state()["pids"].get(daemon), self.root):
                raise LabError(f"{daemon} exited during start; see {self.daemon_log(daemon)}")
            with socket.socket() as sock:
                sock.settimeout(1)
                return sock.connect_ex((host, port)) == 0

        wait_until(
            listening, 30.0, f"{daemon} to listen on {host}:{port}; see {self.daemon_log(daemon)}"
        )

    def daemon_log(self, daemon: str) -> Path:
        """The daemon's own log file, or its captured output when it has none."""
        own = self.log_path(daemon)
        return own if own.exists() else self.run_dir / "log" / f"{daemon}.out"

    def wait_ready(self, timeout_s: float) -> None:
        """Until REST answers ping and every static node is IDLE."""

        def ready() -> bool:
            return self.ping_ok() and all(
                self.node_states().get(n) == ["IDLE"] for n in STATIC_NODES
            )

        try:
            wait_until(ready, timeout_s, f"Slurm {self.release.name} REST ping and IDLE nodes")
        except LabError as err:
            states: dict[str, list[str]] = {}
            with contextlib.suppress(LabError):
                states = self.node_states()
            raise LabError(
                f"{err} (node states: {states or 'unknown'}); see {self.log_path('slurmctld')} "
                f"and the other logs in {self.run_dir / 'log'}"
            ) from None

    # ---- dynamic nodes ---------------------------------------------------------------

    def add_dynamic_node(
        self, name: str, conf: str = f"RealMemory={MAX_NODE_MEMORY_MB} Features=dyn"
    ) -> None:
        """Start `slurmd -Z` for a new node in its own namespace; it registers itself."""
        if not self.release.dynamic_nodes:
            raise LabError(f"the Slurm {self.release.name} lab does not allow dynamic nodes")
        state = self.load_state()
        taken = state.setdefault("dynamic_nodes", {})
        if name in taken:
            raise LabError(f"dynamic node {name} already exists")
        taken[name] = min(set(range(FIRST_DYNAMIC_HOST, 250)) - set(taken.values()))
        self.save_state(state)
        netns = self.create_node_netns(name, taken[name])
        (self.run_dir / "spool" / name).mkdir(exist_ok=True)
        self.start_daemon(
            f"slurmd-{name}",
            ["slurmd", "-D", "-Z", "--conf-server", self.conf_server, "--conf", conf],
            netns=netns,
            hostname=name,
        )

    def remove_dynamic_node(self, name: str) -> None:
        """Stop the node's slurmd, delete the node from slurmctld, remove its namespace.

        Idempotent: a node already deleted (e.g. by the code under test) is fine.
        """
        state = self.load_state()
        pid = state.get("pids", {}).pop(f"slurmd-{name}", None)
        state.get("dynamic_nodes", {}).pop(name, None)
        self.save_state(state)
        if pid:
            stop_pids([pid], in_chroot(self.root))
        if name in self.node_states():
            self.run(["scontrol", "delete", f"nodename={name}"], check=True)
        netns = f"{self.release.prefix}-{name}"
        if netns in lab_netns(self.release):
            sh("ip", "netns", "delete", netns)

    # ---- status ----------------------------------------------------------------------

    def daemons_alive(self) -> dict[str, bool]:
        """Every daemon the lab must run (plus dynamic slurmds it started) and whether it runs."""
        pids = self.load_state().get("pids", {})
        required = ["slurmctld", "slurmrestd", *(f"slurmd-{node}" for node in STATIC_NODES)]
        if self.release.accounting:
            required += ["mariadbd", "slurmdbd"]
        return {name: pid_alive(pids.get(name), self.root) for name in sorted({*required, *pids})}

    def is_healthy(self) -> bool:
        return all(self.daemons_alive().values()) and self.ping_ok()

    def status(self) -> dict[str, Any]:
        """Pids and their liveness, REST URL, API versions and node states."""
        state = self.load_state()
        alive = self.daemons_alive()
        healthy = all(alive.values()) and self.ping_ok()
        return {
            "release": self.release.name,
            "cluster": self.release.cluster,
            "url": self.url,
            "daemons": {
                name: {"pid": state.get("pids", {}).get(name), "alive": ok}
                for name, ok in alive.items()
            },
            "api_versions": state.get("api_versions", []),
            "nodes": self.node_states() if healthy else {},
            "healthy": healthy,
            "up": any(alive.values()),
        }

    # ---- down ------------------------------------------------------------------------

    def down(self, quiet: bool = False) -> None:
        """Stop every lab process, undo every mount, delete namespaces, veths and bridge."""
        if not quiet:
            log(f"stopping Slurm {self.release.name} lab...")
        # Daemons first (slurmctld saves its state on SIGTERM), then whatever else runs in the
        # chroot: slurmstepd and job processes that slurmd leaves behind.
        stop_pids(list(self.load_state().get("pids", {}).values()), in_chroot(self.root))
        for _attempt in range(3):  # a dying slurmstepd may still fork; bounded, leftovers() reports
            stop_pids(pids_in_chroot(self.root), in_chroot(self.root), grace_s=2.0)
        unmount_under(self.root)
        # Deleting a namespace takes its veth pair along; the bridge (and any straggler) is ours.
        remove_lab_network(self.release)
        self.state_path.unlink(missing_ok=True)
        problems = self.leftovers()
        if problems:
            raise LabError(f"Slurm {self.release.name} lab did not go down cleanly: {problems}")

    def leftovers(self) -> dict[str, list[Any]]:
        """What of this lab still runs, is mounted or exists; empty when it is fully down."""
        return lab_leftovers(self.root, self.release, mounts=mounts_under(self.root))


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def selected(release: str) -> list[SlurmLab]:
    names = TEST_RELEASES if release == "all" else [release]
    return [SlurmLab(name) for name in names]


def cmd_up(labs: list[SlurmLab], args: argparse.Namespace) -> int:
    for lab in labs:
        lab.up()
    return 0


def cmd_down(labs: list[SlurmLab], args: argparse.Namespace) -> int:
    for lab in labs:
        lab.down()
    log("down: no lab process, mount, namespace or bridge left")
    return 0


def cmd_status(labs: list[SlurmLab], args: argparse.Namespace) -> int:
    reports = [lab.status() for lab in labs]
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        for report in reports:
            print_status(report)
    if all(r["healthy"] for r in reports):
        return 0
    return EXIT_DOWN if not any(r["up"] for r in reports) else EXIT_DEGRADED


def print_status(report: dict[str, Any]) -> None:
    print(f"Slurm {report['release']} ({report['cluster']}): {health(report)}")
    if not report["up"]:
        return
    print(f"  REST        {report['url']}  API {' '.join(report['api_versions'])}")
    for name, daemon in sorted(report["daemons"].items()):
        print(f"  {name:<14}pid {daemon['pid']!s:<8}{'alive' if daemon['alive'] else 'DEAD'}")
    for node, state in sorted(report["nodes"].items()):
        print(f"  node {node:<9}{'+'.join(state)}")


def cmd_env(labs: list[SlurmLab], args: argparse.Namespace) -> int:
    values = {}
    for lab in labs:
        state = lab.load_state()
        if not state:
            continue
        prefix = f"SLURM_LAB_{lab.release.tag}"
        values.update(
            {
                f"{prefix}_URL": lab.url,
                f"{prefix}_JWT_KEY": str(lab.jwt_key_path),
                f"{prefix}_CLUSTER": lab.release.cluster,
                f"{prefix}_CONF_SERVER": lab.conf_server,
                f"{prefix}_API_VERSIONS": " ".join(state.get("api_versions", [])),
                f"{prefix}_CHROOT": str(lab.root),
            }
        )
    print_env(values, args)
    return 0 if values else EXIT_DOWN


def cmd_token(labs: list[SlurmLab], args: argparse.Namespace) -> int:
    if len(labs) != 1:
        raise LabError("token needs one --release (26.05 or 24.11)")
    print(labs[0].token(args.user, args.lifespan))
    return 0


COMMANDS = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
    "token": cmd_token,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Real Slurm clusters for the hpcops.slinky tests.")
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--release", choices=[*RELEASES, "all"], default="all")
    parser.add_argument("--json", action="store_true", help="status/env: print JSON")
    parser.add_argument("--user", default="root", help="token: Slurm user name (claim sun)")
    parser.add_argument("--lifespan", type=int, default=600, help="token: seconds until it expires")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("slurm_lab: must run as root (chroot, mounts, network namespaces)", file=sys.stderr)
        return 2
    return run_cli("slurm_lab", lambda: COMMANDS[args.command](selected(args.release), args))


if __name__ == "__main__":
    sys.exit(main())
