# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the CPU of a command goes, process by process, kind's nodes included.

    python3 benchmarks/cpu_by_process.py [--every 5] [--top 40] -- COMMAND [ARG...]

e.g. `python3 benchmarks/cpu_by_process.py -- .venv/bin/pytest --phases=kind tests/integration`.

A lane's own figure (`make test`'s core-minutes) counts only the processes it waited for:
the daemons in kind's node containers (kubelets, the apiserver, etcd, the controllers) are
children of containerd, and BSD process accounting does not see them either. This samples
every process of the machine each `--every` seconds while COMMAND runs and sums each one's
user and system time from its first to its last sighting, then prints core-minutes per
where (this host, or the kind node named by its container) and per program. A process that
lives less than one period is missed: the figures are for daemons and long builds, the
short-lived ones (ansible's forks) are undercounted.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
HOST = "host"


@dataclass
class Seen:
    program: str
    where: str
    first_ticks: int
    last_ticks: int


def container_of(pid: str) -> str:
    """The docker container id (12 characters) whose cgroup holds pid, or HOST."""
    try:
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return HOST
    for line in cgroups.splitlines():
        path = line.split(":", 2)[-1]
        if "/docker/" in path:
            return path.split("/docker/", 1)[1].split("/", 1)[0][:12]
        if "docker-" in path and ".scope" in path:  # the systemd cgroup driver
            return path.split("docker-", 1)[1][:12]
    return HOST


def sample(seen: dict[tuple[str, str], Seen], *, baseline: bool) -> None:
    """Every process's CPU ticks now; at the baseline, what they had used before counts not."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        program = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        key = (pid, fields[19])  # pid and start time: a reused pid is another process
        if key in seen:
            seen[key].last_ticks = ticks
            seen[key].program = program  # after an exec
        else:
            seen[key] = Seen(program, container_of(pid), ticks if baseline else 0, ticks)


def container_names() -> dict[str, str]:
    """Short container id -> name, for the containers running now (none without docker)."""
    try:
        listed = subprocess.run(
            ["docker", "ps", "--format", "{{.ID}} {{.Names}}"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split(" ", 1) for line in listed.splitlines() if " " in line)


def by_use(used: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(used.items(), key=lambda item: -item[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--top", type=int, default=40, help="programs to list")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")

    seen: dict[tuple[str, str], Seen] = {}
    names: dict[str, str] = {}
    asked: set[str] = set()
    sample(seen, baseline=True)
    began = time.monotonic()
    child = subprocess.Popen(command)
    while child.poll() is None:
        time.sleep(args.every)
        sample(seen, baseline=False)
        unnamed = {process.where for process in seen.values()} - names.keys() - asked - {HOST}
        if unnamed:  # docker is asked once per new container, while it runs
            names |= container_names()
            asked |= unnamed
    took_min = (time.monotonic() - began) / 60

    per_where: dict[str, float] = collections.defaultdict(float)
    per_program: dict[str, float] = collections.defaultdict(float)
    for process in seen.values():
        used = (process.last_ticks - process.first_ticks) / TICKS / 60
        where = names.get(process.where, process.where)
        per_where[where] += used
        per_program[process.program if where == HOST else f"{where}: {process.program}"] += used
    total = sum(per_where.values())
    print(f"\n{' '.join(command)}: exit {child.returncode} after {took_min:.1f} min")
    print(f"{total:.1f} core-minutes sampled ({total / took_min:.2f} cores on average)\n")
    print("| where | core-minutes |\n| --- | --- |")
    for where, used in by_use(per_where):
        print(f"| {where} | {used:.2f} |")
    print("\n| program | core-minutes |\n| --- | --- |")
    for program, used in by_use(per_program)[: args.top]:
        print(f"| {program} | {used:.2f} |")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
