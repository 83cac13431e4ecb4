# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: what the preflight reads on a node host. Read-only, standard library only.

Each reader returns plain data (no judgement): the checks on the controller decide what is
wrong. Configuration files come back as text (the controller parses TOML and YAML), so
the host needs nothing beyond Python. A reader that cannot read says so in `error`
instead of failing the whole gathering.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import grp
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
import typing as t

# Where each piece lives; the module's options may move the configuration files.
CGROUP_ROOT = "/sys/fs/cgroup"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
TIME_SERVICES = ("chrony", "chronyd", "systemd-timesyncd", "ntp", "ntpsec", "ntpd", "openntpd")
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
# adjtimex(2) returns TIME_ERROR while the kernel clock is not synchronised.
TIME_ERROR = 5
STA_UNSYNC = 0x0040


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _run(argv: list[str], timeout: float = 15) -> tuple[int, str, str]:
    if not shutil.which(argv[0]):
        return 127, "", f"{argv[0]}: not found"
    try:
        proc = subprocess.run(  # fixed argument lists, no shell
            argv, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return 1, "", str(err)
    return proc.returncode, proc.stdout, proc.stderr


def os_release() -> dict[str, str]:
    text = _read("/etc/os-release") or _read("/usr/lib/os-release") or ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return {
        "id": fields.get("ID", ""),
        "version_id": fields.get("VERSION_ID", ""),
        "pretty_name": fields.get("PRETTY_NAME", ""),
    }


def kernel() -> dict[str, t.Any]:
    release = os.uname().release
    return {"release": release, "cmdline": (_read("/proc/cmdline") or "").strip()}


def mount_types(mounts_text: str) -> dict[str, str]:
    """Mount point to filesystem type, from /proc/self/mounts (pure)."""
    types = {}
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            types[fields[1].replace("\\040", " ")] = fields[2]
    return types


def cgroup_mode(types: dict[str, str]) -> str:
    """unified (v2 only), hybrid (v1 controllers, v2 beside them), legacy (v1) or none (pure)."""
    if types.get(CGROUP_ROOT) == "cgroup2":
        return "unified"
    if "cgroup2" in types.values():
        return "hybrid"
    if "cgroup" in types.values():
        return "legacy"
    return "none"


def enabled_v1_controllers(proc_cgroups: str) -> list[str]:
    """The enabled controllers of /proc/cgroups (subsys_name hierarchy num_cgroups enabled)."""
    controllers = []
    for line in proc_cgroups.splitlines()[1:]:
        fields = line.split()
        if len(fields) == 4 and fields[3] == "1":
            controllers.append(fields[0])
    return sorted(controllers)


def cgroup() -> dict[str, t.Any]:
    mode = cgroup_mode(mount_types(_read("/proc/self/mounts") or ""))
    if mode == "unified":
        controllers = sorted((_read(f"{CGROUP_ROOT}/cgroup.controllers") or "").split())
    else:
        controllers = enabled_v1_controllers(_read("/proc/cgroups") or "")
    return {"mode": mode, "controllers": controllers}


def sysctls(names: list[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for name in names:
        text = _read("/proc/sys/" + name.replace(".", "/"))
        values[name] = None if text is None else " ".join(text.split())
    return values


def _feature_present(name: str) -> bool:
    """What a module provides, for kernels built without module tables (modules.builtin)."""
    if name == "br_netfilter":
        return os.path.isdir("/proc/sys/net/bridge")
    filesystems = (_read("/proc/filesystems") or "").split()
    return name in filesystems


def kernel_modules(names: list[str]) -> dict[str, str]:
    """Each module: loaded, builtin or missing (as the running kernel has it)."""
    loaded = {line.split()[0] for line in (_read("/proc/modules") or "").splitlines() if line}
    builtin_text = _read(f"/lib/modules/{os.uname().release}/modules.builtin") or ""
    builtin = {os.path.basename(line).split(".ko")[0] for line in builtin_text.splitlines()}
    states = {}
    for name in names:
        key = name.replace("-", "_")
        if key in loaded or os.path.isdir(f"/sys/module/{key}"):
            states[name] = "loaded" if key in loaded else "builtin"
        elif key in builtin or _feature_present(key):
            states[name] = "builtin"
        else:
            states[name] = "missing"
    return states


def swap_devices(proc_swaps: str) -> list[dict[str, t.Any]]:
    """Active swap from /proc/swaps (Filename Type Size Used Priority) (pure)."""
    devices = []
    for line in proc_swaps.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            devices.append({"name": fields[0], "size_kib": int(fields[2])})
    return devices


def fstab_swap_entries(fstab: str) -> list[str]:
    """The devices or files /etc/fstab turns on as swap at boot (pure)."""
    entries = []
    for line in fstab.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            entries.append(fields[0])
    return entries


def swap() -> dict[str, t.Any]:
    devices = swap_devices(_read("/proc/swaps") or "")
    return {
        "devices": devices,
        "total_kib": sum(d["size_kib"] for d in devices),
        "fstab": fstab_swap_entries(_read("/etc/fstab") or ""),
    }


def _process_cmdline(name: str) -> list[str] | None:
    """The argv of the first process whose executable is called `name`."""
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        raw = None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
        if argv and os.path.basename(argv[0]) == name:
            return argv
    return None


def _flag(argv: list[str], name: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and index + 1 < len(argv):
            return argv[index + 1]
    return None


def kubelet(config_path: str) -> dict[str, t.Any]:
    """The kubelet's configuration file and drop-ins, and the flags of the running kubelet."""
    argv = _process_cmdline("kubelet")
    flags = {}
    if argv:
        for name in ("config", "config-dir", "cgroup-driver", "fail-swap-on"):
            value = _flag(argv, name)
            if value is not None:
                flags[name] = value
    path = flags.get("config", config_path)
    dropins = {}
    config_dir = flags.get("config-dir")
    if config_dir and os.path.isdir(config_dir):
        for entry in sorted(os.listdir(config_dir)):
            if entry.endswith(".conf"):
                dropins[entry] = _read(os.path.join(config_dir, entry))
    return {
        "installed": bool(shutil.which("kubelet")) or argv is not None,
        "running": argv is not None,
        "flags": flags,
        "config_path": path,
        "config": _read(path),
        "dropins": dropins,
    }


def containerd(config_path: str) -> dict[str, t.Any]:
    """containerd's version and effective configuration (`config dump`: file, imports, defaults)."""
    if not shutil.which("containerd"):
        return {"installed": False, "version": None, "config": _read(config_path)}
    rc, out, _err = _run(["containerd", "--version"])
    match = re.search(r"\bv?(\d+\.\d+\.\d+)", out) if rc == 0 else None
    rc, dump, err = _run(["containerd", "--config", config_path, "config", "dump"])
    return {
        "installed": True,
        "version": match.group(1) if match else None,
        "config": dump if rc == 0 else _read(config_path),
        "config_source": "dump" if rc == 0 else "file",
        "error": None if rc == 0 else err.strip()[-300:],
    }


def _unit_active(unit: str) -> bool:
    rc, out, _err = _run(["systemctl", "is-active", unit])
    return rc == 0 and out.strip() == "active"


def nvidia() -> dict[str, t.Any]:
    version_text = _read("/proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+(?:\.\d+)+)", version_text)
    nvswitch = os.path.isdir("/proc/driver/nvidia-nvswitch") or any(
        entry.startswith("nvidia-nvswitch") for entry in _listdir("/dev")
    )
    return {
        "module_loaded": os.path.isdir("/sys/module/nvidia"),
        "driver_version": match.group(1) if match else None,
        "smi": shutil.which("nvidia-smi"),
        "nvswitch": nvswitch,
        "fabricmanager_active": _unit_active(FABRIC_MANAGER_UNIT) if nvswitch else None,
    }


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


class _Timex(ctypes.Structure):
    # struct timex of <sys/timex.h> on Linux; only the head is read.
    _fields_: t.ClassVar = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_long * 30),
    ]


def clock() -> dict[str, t.Any]:
    """Whether the kernel clock is synchronised (adjtimex) and which time service runs."""
    synchronized = None
    maxerror_us = None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
        if state >= 0:
            synchronized = state != TIME_ERROR and not timex.status & STA_UNSYNC
            maxerror_us = int(timex.maxerror)
    except (OSError, AttributeError):
        pass
    services = [unit for unit in TIME_SERVICES if _unit_active(unit)]
    return {
        "synchronized": synchronized,
        "maxerror_us": maxerror_us,
        "services": services,
        "epoch": time.time(),
    }


def resolve(names: list[str]) -> dict[str, list[str]]:
    found = {}
    for name in names:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            found[name] = sorted({str(info[4][0]) for info in infos})
        except (OSError, UnicodeError):
            found[name] = []
    return found


def interfaces() -> dict[str, t.Any]:
    """Interfaces with MTU and addresses, and the one of the default route (iproute2 JSON)."""
    rc, out, err = _run(["ip", "-j", "address", "show"])
    if rc != 0:
        return {"error": err.strip() or "ip -j address show failed", "links": [], "default": None}
    links = []
    for link in json.loads(out or "[]"):
        links.append(
            {
                "name": link.get("ifname"),
                "mtu": link.get("mtu"),
                "up": "UP" in link.get("flags", []),
                "addresses": [
                    f"{a['local']}/{a['prefixlen']}"
                    for a in link.get("addr_info", [])
                    if a.get("scope") != "host" and "local" in a
                ],
            }
        )
    default = None
    rc, out, _err = _run(["ip", "-j", "route", "show", "default"])
    if rc == 0:
        routes = json.loads(out or "[]")
        if routes:
            default = routes[0].get("dev")
    return {"links": links, "default": default, "error": None}


def user(name: str) -> dict[str, t.Any] | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "group": group}


def mounts(paths: list[str]) -> dict[str, dict[str, str] | None]:
    """Each path: the filesystem mounted exactly there (source, type), or None."""
    table = {}
    for line in (_read("/proc/self/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) >= 3:
            table[fields[1].replace("\\040", " ")] = {"source": fields[0], "fstype": fields[2]}
    return {path: table.get(path.rstrip("/") or "/") for path in paths}


def gather(
    *,
    sysctl_names: list[str],
    module_names: list[str],
    mount_paths: list[str],
    resolve_names: list[str],
    slurm_user: str,
    kubelet_config: str = KUBELET_CONFIG,
    containerd_config: str = CONTAINERD_CONFIG,
) -> dict[str, t.Any]:
    return {
        "hostname": socket.gethostname(),
        "os": os_release(),
        "kernel": kernel(),
        "cgroup": cgroup(),
        "sysctls": sysctls(sysctl_names),
        "kernel_modules": kernel_modules(module_names),
        "swap": swap(),
        "kubelet": kubelet(kubelet_config),
        "containerd": containerd(containerd_config),
        "nvidia": nvidia(),
        "clock": clock(),
        "resolve": resolve(resolve_names),
        "network": interfaces(),
        "slurm_user": user(slurm_user),
        "mounts": mounts(mount_paths),
    }
