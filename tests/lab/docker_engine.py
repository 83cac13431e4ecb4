# SPDX-License-Identifier: GPL-3.0-or-later
"""The container engine the kind scenarios run on: Debian's dockerd, started by pid.

This machine has no init system, so nothing starts dockerd for us, and two of its
quirks need handling (see ../shared/reference/lab.md, "Containers and kind"):

* its capability bounding set lacks CAP_SYS_RESOURCE, which docker 20.10 grants
  privileged containers: dockerd runs ``runc_capbnd.py`` as its default runtime;
* dockerd sets the iptables FORWARD policy to DROP while ``bridge-nf-call-iptables`` is on,
  which would cut the Slurm lab's own bridges (``hpl*``): ``up`` accepts them in
  DOCKER-USER, and ``down`` removes every rule and chain dockerd made and puts the policy
  and sysctls back, then compares the rules with those recorded before ``up``.

Images and containers live under ``$HPCOPS_LAB_CACHE/docker`` (kept across runs: the
images ``kind_images.py`` builds are the cache); runtime files under
``$HPCOPS_LAB_RUN/docker``.  The socket is the default ``/var/run/docker.sock``, which kind
and the docker CLI expect.

CLI::

    python3 tests/lab/docker_engine.py {up,down,status}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from toolbox import CACHE_DIR, LabError, logger, pid_exe, read_json, run_cli
from toolbox import RUN_DIR as LAB_RUN_DIR
from toolbox import sh as run

RUN_DIR = LAB_RUN_DIR / "docker"
DATA_ROOT = CACHE_DIR / "docker"
SOCKET = Path("/var/run/docker.sock")
RUNTIME_NAME = "hpcops-capbnd"
DEBIAN_PACKAGES = ("docker.io", "iptables")
# The Debian binaries, never the newer docker CLI some machines have in /usr/local/bin:
# its `docker build` wants buildx, and the scripts here must talk to the daemon they start.
DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
SYSCTLS = ("net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
# Interfaces of the Slurm lab (slurm_lab.py names them hpl<release>-...).
LAB_INTERFACES = "hpl+"
# What a dockerd's rules name: its chains, its default bridge and its networks' bridges.
# Its chains and bridges, and the hairpin MASQUERADE it adds in POSTROUTING for each published
# port (`-s A/32 -d A/32 ... --dport P -j MASQUERADE`), which names neither.
DOCKERD_RULE = re.compile(
    r"DOCKER|\bdocker0\b|\bbr-[0-9a-f]{12}\b"
    r"|^-A POSTROUTING -s (\S+)/32 -d \1/32 .*--dport \d+ -j MASQUERADE$"
)


log = logger("docker-engine")


def rules(tool: str) -> list[str]:
    """Every rule, policy and user chain of tool's tables, without counters."""
    if shutil.which(tool) is None:
        return []
    out = run(f"{tool}-save", check=False).stdout
    kept = []
    for line in out.splitlines():
        # Table headers say only that a table exists, not that anything is in it.
        if line.startswith(("#", "*", "COMMIT")) or not line.strip():
            continue
        if line.startswith(":"):
            chain, policy = line[1:].split()[:2]
            # Built-in chains with the default policy are not a change.
            if policy != "ACCEPT":
                kept.append(f":{chain} {policy}")
            continue
        kept.append(line)
    return kept


def docker_bridges() -> list[str]:
    """docker0 and the bridges of dockerd's networks (br-<12 hex digits of the network>)."""
    links = run("ip", "-o", "link", "show", check=False).stdout
    return re.findall(r"^\d+: (docker0|br-[0-9a-f]{12})[@:]", links, flags=re.M)


def firewall_snapshot() -> dict[str, list[str]]:
    return {tool: rules(tool) for tool in ("iptables", "ip6tables")}


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        path = Path("/proc/sys") / name
        if path.exists():
            values[name] = path.read_text().strip()
    return values


class DockerEngine:
    """dockerd and the containerd it starts, as one lab component."""

    state_path = RUN_DIR / "state.json"
    pidfile = RUN_DIR / "dockerd.pid"
    log_path = RUN_DIR / "dockerd.log"

    def state(self) -> dict[str, object]:
        return read_json(self.state_path)

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        exe = pid_exe(pid)
        return pid if exe is not None and exe.endswith("dockerd") else None

    def answering(self) -> bool:
        return (
            run(DOCKER, "version", "--format", "{{.Server.Version}}", check=False).returncode == 0
        )

    def up(self) -> None:
        if self.pid() and self.answering():
            log(f"dockerd already runs (pid {self.pid()})")
            self.allow_lab_bridges()
            return
        missing = [
            p
            for p in (DOCKERD, DOCKER, "/usr/sbin/runc", "/usr/sbin/iptables")
            if not Path(p).exists()
        ]
        if missing:
            raise LabError(
                f"{', '.join(missing)} missing: run `apt-get install {' '.join(DEBIAN_PACKAGES)}` "
                "(or `make deps`)"
            )
        if SOCKET.exists() and self.answering():
            raise LabError(f"another docker daemon answers on {SOCKET}; stop it first")
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        # No dockerd runs, so rules that name its chains or bridges belong to one that was
        # killed: recorded as "before", down would keep them for good.
        self.remove_stale_rules()
        # Recorded before dockerd touches anything, so down can put it all back.
        created_lib_modules = not Path("/lib/modules").exists()
        state = {
            "firewall": firewall_snapshot(),
            "sysctls": read_sysctls(),
            # kind bind-mounts /lib/modules read-only; dockerd would create it anyway.
            "created_lib_modules": created_lib_modules,
        }
        if created_lib_modules:
            Path("/lib/modules").mkdir()
        self.state_path.write_text(json.dumps(state, indent=2))
        # A copy of the wrapper, so the daemon outlives this checkout, run by this Python
        # (dockerd's PATH may have no `python`).
        wrapper = RUN_DIR / "runc-capbnd"
        source = Path(__file__).with_name("runc_capbnd.py").read_text().split("\n", 1)[1]
        wrapper.write_text(f"#!{sys.executable}\n{source}")
        wrapper.chmod(0o755)
        cmd = [
            DOCKERD,
            f"--add-runtime={RUNTIME_NAME}={wrapper}",
            f"--default-runtime={RUNTIME_NAME}",
            "--exec-opt=native.cgroupdriver=cgroupfs",
            "--storage-driver=overlay2",
            f"--data-root={DATA_ROOT}",
            f"--exec-root={RUN_DIR / 'exec'}",
            f"--pidfile={self.pidfile}",
            # Nothing is pulled here: no registry answers.
            "--max-concurrent-downloads=1",
        ]
        log(f"starting dockerd (log: {self.log_path})")
        with self.log_path.open("a") as out:
            subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (self.pid() and self.answering()):
            if time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace").splitlines()[-8:]
                self.down()
                raise LabError("dockerd did not answer within 60 s:\n  " + "\n  ".join(tail))
            time.sleep(0.5)
        self.allow_lab_bridges()
        log(f"dockerd runs (pid {self.pid()}), runtime {RUNTIME_NAME}, data in {DATA_ROOT}")

    def allow_lab_bridges(self) -> None:
        for direction in ("-i", "-o"):
            rule = ["DOCKER-USER", direction, LAB_INTERFACES, "-j", "ACCEPT"]
            if run("iptables", "-C", *rule, check=False).returncode != 0:
                run("iptables", "-I", *rule)

    def down(self) -> None:
        pid = self.pid()
        if pid:
            log(f"stopping dockerd (pid {pid}) and its containerd")
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while self.pid() and time.monotonic() < deadline:
                time.sleep(0.5)
            if self.pid():
                os.kill(pid, signal.SIGKILL)
        state = self.state()
        self.remove_firewall_rules()
        for name, value in dict(state.get("sysctls", {})).items():  # type: ignore[call-overload]
            (Path("/proc/sys") / name).write_text(f"{value}\n")
        # docker0 and the bridges of its networks (kind's among them): dockerd makes them
        # again from its data at its next start.
        for name in docker_bridges():
            run("ip", "link", "delete", name, check=False)
        if state.get("created_lib_modules"):
            with_content = (
                any(Path("/lib/modules").iterdir()) if Path("/lib/modules").exists() else True
            )
            if not with_content:
                Path("/lib/modules").rmdir()
        mounts = [
            line
            for line in Path("/proc/mounts").read_text().splitlines()
            if str(RUN_DIR) in line or str(DATA_ROOT) in line
        ]
        for line in reversed(mounts):
            run("umount", "-l", line.split()[1], check=False)
        left = self.leftovers()
        if left:
            # The record stays, so another down can compare against it.
            raise LabError("dockerd left behind: " + "; ".join(left))
        self.state_path.unlink(missing_ok=True)

    def remove_firewall_rules(self) -> None:
        """Delete every rule and chain added since up (dockerd leaves them when it exits)."""
        before: dict[str, list[str]] = self.state().get("firewall", {}) or {}  # type: ignore[assignment]
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool) is None:
                continue
            kept = set(before.get(tool, []))
            for table in ("filter", "nat"):
                listed = run(tool, "-t", table, "-S", check=False).stdout.splitlines()
                for line in listed:
                    if line.startswith("-A ") and line not in kept:
                        run(tool, "-t", table, *line.replace("-A ", "-D ", 1).split(), check=False)
                for line in listed:
                    if line.startswith("-N DOCKER"):
                        run(tool, "-t", table, "-X", line.split()[1], check=False)
            policies = {
                line.split()[0][1:]: line.split()[1] for line in kept if line.startswith(":")
            }
            for chain in ("INPUT", "FORWARD", "OUTPUT"):
                run(tool, "-P", chain, policies.get(chain, "ACCEPT"), check=False)

    def remove_stale_rules(self) -> None:
        """Rules, chains and bridges of a dockerd that died without `down` (killed with its run)."""
        removed = []
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool) is None:
                continue
            for table in ("filter", "nat"):
                listed = run(tool, "-t", table, "-S", check=False).stdout.splitlines()
                for line in listed:
                    if line.startswith("-A ") and DOCKERD_RULE.search(line):
                        run(tool, "-t", table, *line.replace("-A ", "-D ", 1).split(), check=False)
                        removed.append(f"{tool} {line}")
                for line in listed:
                    if line.startswith("-N DOCKER"):
                        run(tool, "-t", table, "-X", line.split()[1], check=False)
                        if table == "filter" and "-P FORWARD DROP" in listed:
                            # dockerd's doing (see the module's docstring), not the site's.
                            run(tool, "-P", "FORWARD", "ACCEPT", check=False)
        for name in docker_bridges():
            run("ip", "link", "delete", name, check=False)
            removed.append(f"interface {name}")
        if removed:
            log(f"removed {len(removed)} rules and interfaces of a dockerd that was killed")

    def leftovers(self) -> list[str]:
        """What differs from before up: firewall rules, docker0, a running daemon."""
        left = []
        if self.pid():
            left.append(f"dockerd still runs (pid {self.pid()})")
        before: dict[str, list[str]] = self.state().get("firewall", {}) or {}  # type: ignore[assignment]
        if before:
            for tool, now in firewall_snapshot().items():
                extra = [line for line in now if line not in before.get(tool, [])]
                if extra:
                    left.append(f"{tool}: {', '.join(extra)}")
        left += [f"interface {name}" for name in docker_bridges()]
        return left

    def status(self) -> dict[str, object]:
        pid = self.pid()
        return {
            "dockerd": pid,
            "answering": bool(pid) and self.answering(),
            "data_root": str(DATA_ROOT),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="dockerd for the kind scenarios.")
    parser.add_argument("command", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    engine = DockerEngine()

    def command() -> int:
        if args.command == "up":
            engine.up()
        elif args.command == "down":
            engine.down()
        else:
            status = engine.status()
            print(json.dumps(status, indent=2))
            return 0 if status["answering"] else 1
        return 0

    return run_cli("docker_engine", command, (LabError, OSError))


if __name__ == "__main__":
    sys.exit(main())
