# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian 12 and 13 hosts for the bare-metal preflight: containers with systemd as PID 1.

Each image is a debootstrap root (the host's Debian mirror) with systemd, Python, iproute2
and Debian's containerd, imported with ``docker import`` as kind_images.py imports its
images; a container of it is a host Ansible reaches with the ``community.docker.docker``
connection. The kernel, its modules and the clock are the machine's; everything in /etc,
the network namespace and the services are the container's own.

CLI::

    python3 tests/lab/node_hosts.py build     # the images that are missing or stale
    python3 tests/lab/node_hosts.py list      # their references

Needs root and a running dockerd (``docker_engine.py up``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import kind_images
from kind_images import Image, cached_root, copy_root, debootstrap, docker, root_recipe
from toolbox import LabError, run_cli, run_logged, wait_until

# Debian release by suite; bookworm's systemd 252 and trixie's 257 run as PID 1 on a
# cgroup v1 host (forky's 262 does not: lab.md).
SUITES = {"bookworm": "12", "trixie": "13"}
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "iproute2",
    "kmod",
    "procps",
    "util-linux",
    "containerd",
    "runc",
    "ca-certificates",
)
# Units that have nothing to do in a container, or fail there.
MASKED_UNITS = (
    "systemd-udevd.service",
    "systemd-udevd-kernel.socket",
    "systemd-udevd-control.socket",
    "getty@tty1.service",
    "console-getty.service",
    "systemd-binfmt.service",
    "systemd-timesyncd.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
)
RUN_OPTIONS = (
    "--privileged",
    "--security-opt", "seccomp=unconfined",
    "--tmpfs", "/run",
    "--tmpfs", "/run/lock",
    "--tmpfs", "/tmp",
    "--volume", "/var/lib/containerd",
    "--stop-signal", "SIGRTMIN+3",
    "--env", "container=docker",
)  # fmt: skip
BOOT_DEADLINE_S = 60.0


def image_ref(suite: str) -> str:
    return f"{kind_images.REGISTRY}/node-host:{suite}"


def host_root(suite: str) -> Path:
    def build(root: Path, log_path: Path) -> None:
        debootstrap(suite, root, log_path, PACKAGES)
        for unit in MASKED_UNITS:
            run_logged(["chroot", str(root), "systemctl", "mask", unit], log_path)
        run_logged(["chroot", str(root), "systemctl", "enable", "containerd.service"], log_path)
        (root / "etc/machine-id").write_text("")

    return cached_root(
        f"{suite}-node-host", f"1 {' '.join(PACKAGES)} {' '.join(MASKED_UNITS)}", build
    )


def image(suite: str) -> Image:
    return Image(
        key=f"node-host-{suite}",
        ref=image_ref(suite),
        fill=copy_root(lambda: host_root(suite)),
        inputs=lambda: root_recipe(host_root(suite)),
        cmd=("/sbin/init",),
    )


def ensure(suites: Sequence[str] = tuple(SUITES)) -> dict[str, str]:
    # The lock of kind_images: its background preparation builds the same roots.
    with kind_images.build_lock():
        return {suite: kind_images.ensure_image(image(suite))[0] for suite in suites}


def start(name: str, suite: str, network: str, extra: Sequence[str] = ()) -> None:
    """A host container on `network`, booted (systemd reached its default target)."""
    docker("rm", "-f", name, check=False)
    docker(
        "run", "--detach", "--name", name, "--hostname", name, "--network", network,
        *RUN_OPTIONS, *extra, image_ref(suite),
    )  # fmt: skip

    def booted() -> bool:
        state = docker("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
        return state in ("running", "degraded")

    try:
        wait_until(booted, BOOT_DEADLINE_S, f"systemd of {name} up")
    except LabError:
        logs = docker("logs", "--tail", "30", name, check=False)
        raise LabError(f"{name} did not boot: {logs.stdout[-2000:]}{logs.stderr[-2000:]}") from None


def execute(name: str, *argv: str, check: bool = True) -> str:
    return docker("exec", name, *argv, check=check).stdout


def remove(*names: str) -> None:
    for name in names:
        docker("rm", "--force", "--volumes", name, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "list"])
    args = parser.parse_args(argv)
    if args.action == "list":
        for suite in SUITES:
            print(image_ref(suite))
        return 0

    def build() -> int:
        for suite, ref in ensure().items():
            print(f"{suite}: {ref}")
        return 0

    return run_cli("node_hosts", build, (LabError,))


if __name__ == "__main__":
    sys.exit(main())
