#!/usr/bin/env python
# SPDX-License-Identifier: GPL-3.0-or-later
"""runc, minus the capabilities this machine cannot grant.

dockerd 20.10 gives a privileged container every capability it knows, including
CAP_SYS_RESOURCE, which this host's capability bounding set lacks; runc then fails with
"unable to apply caps: operation not permitted" on `docker run --privileged` and on
`docker exec` into such a container.  dockerd runs this file as its default runtime
(`docker_engine.py` registers it): for `create`/`run` it drops, from the bundle's
config.json, every capability outside the bounding set it runs with, and for `exec` it
does the same in the `--process` file; then it execs the real runc with the same argv.

Only the standard library, no output of its own: containerd's shim reads runc's.
"""

import json
import os
import sys

RUNC = "/usr/sbin/runc"
# Capability numbers from linux/capability.h, in order.
CAPABILITIES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]


def bounding_set():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapBnd:"):
                mask = int(line.split()[1], 16)
    return {f"CAP_{name}" for bit, name in enumerate(CAPABILITIES) if mask >> bit & 1}


def option_value(argv, *names):
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv):
                return argv[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def drop_missing(capabilities, allowed):
    for key, names in list(capabilities.items()):
        if isinstance(names, list):
            capabilities[key] = [name for name in names if name in allowed]


def rewrite(path, process_key):
    with open(path) as handle:
        spec = json.load(handle)
    process = spec.get(process_key, {}) if process_key else spec
    capabilities = process.get("capabilities")
    if not capabilities:
        return
    drop_missing(capabilities, bounding_set())
    with open(path, "w") as handle:
        json.dump(spec, handle)


def main(argv):
    if "create" in argv or "run" in argv:
        bundle = option_value(argv, "--bundle", "-b") or os.getcwd()
        config = os.path.join(bundle, "config.json")
        if os.path.exists(config):
            rewrite(config, "process")
    elif "exec" in argv:
        process = option_value(argv, "--process", "-p")
        if process and os.path.exists(process):
            rewrite(process, None)
    os.execv(RUNC, [RUNC, *argv])  # noqa: S606 - runc, with the argv dockerd gave


if __name__ == "__main__":
    main(sys.argv[1:])
