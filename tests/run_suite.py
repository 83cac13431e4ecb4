# SPDX-License-Identifier: GPL-3.0-or-later
"""`make test`: the whole suite, in lanes that run at once on a 2-core machine.

Most of the suite waits on daemons (slurmctld, the apiserver, kubelets in kind), so one
pytest process leaves a core idle. After the set-up, four lanes start together:

* the checks: lint, sanity and the build checks (one make, at the lowest priority: nothing
  waits on them), log in .build/test-logs/;
* the Slurm lab (a pytest process of its own, log in .build/test-logs/);
* the kind scenarios (another, log in .build/test-logs/): they wait for the kind node
  image, then mostly for kubelets; molecule makes the cluster as soon as the node image is
  built and waits for the rest of the builds only where it loads the images;
* the unit tests, the Kubernetes lab (kwok) and the node_prep hosts, on this terminal: the
  node_prep hosts' Nodes live in the Kubernetes lab.

The kind scenarios and node_prep share dockerd (tests/integration/docker_fixtures.py). As
root, the lab's and kind's Go builds and root filesystems start first, in the background
(log: .kind/prepare.log); the tests that need them wait on their locks. The lab's binaries,
which the Kubernetes tests wait for on a cold machine, build first in line, then the kind
node's, then the rest, and the root filesystems beside the Go builds. The builds are the
path everything else waits on (the kind scenarios load their images only after them), so they
get most of the CPU while the tests fill the rest: their session is a scheduling group of
its own (Linux's autogroup, where a process's niceness counts only within its group), given
the weight of niceness BUILDS_GROUP_NICE.
The summary says what each lane took in minutes and core-minutes, and how busy the cores
were (per minute: .build/test-logs/cpu.log). The logs of the other lanes follow it; the
exit status is non-zero when any lane failed. Nothing is killed: a debootstrap stopped
halfway leaves its mounts behind, so the run waits for every lane and the builds, whatever
happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / ".build" / "test-logs"
PREPARE_LOG = REPO / ".kind" / "prepare.log"
CHECKS = ("lint", "sanity", "build-check", "changelog-lint", "ee-check")
MAIN_PHASES = "units,kwok,node-prep"
# Three quarters of the CPU to the builds while both want it (weights 3121 to 1024): the
# tests' daemons run in sessions of their own and keep their share, only their drivers slow.
BUILDS_GROUP_NICE = -5


@dataclass
class Lane:
    name: str
    command: list[str]
    log: Path | None = None  # None: this terminal
    process: subprocess.Popen[bytes] | None = None
    began: float = 0.0
    took: float = 0.0
    cpu_s: float = 0.0  # user + system of the lane and the descendants it waited for
    returncode: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self, env: dict[str, str]) -> None:
        self.began = time.monotonic()
        out = self.log.open("wb") if self.log else None
        self.process = subprocess.Popen(
            self.command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT if out else None
        )
        if out:
            out.close()

    def wait(self) -> int:
        assert self.process is not None
        self.returncode, self.cpu_s = wait_with_cpu(self.process)
        self.took = time.monotonic() - self.began
        self.done.set()
        return self.returncode

    @property
    def result(self) -> str:
        return "passed" if self.returncode == 0 else f"FAILED (exit {self.returncode})"


def wait_with_cpu(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    """The exit code and CPU seconds (user + system) of a child and the descendants it
    waited for: daemons a lane starts and stops count, kind's containers (children of
    containerd) do not."""
    try:
        _pid, status, usage = os.wait4(process.pid, 0)
    except ChildProcessError:  # reaped meanwhile by Popen.poll() (forward_interrupts)
        return process.wait(), 0.0
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime


class CpuSampler(threading.Thread):
    """The machine's CPU use over the run, from /proc/stat: how busy the cores were, per
    SAMPLE_S, written to a log and summed up at the end. A run that keeps every core busy is
    bound by the CPU (fewer or cheaper builds and tests help); one that does not, by waits."""

    SAMPLE_S = 60.0

    def __init__(self, log: Path) -> None:
        super().__init__(daemon=True)
        self.log = log
        self.first = self.last = cpu_times()

    def run(self) -> None:  # until the run ends: a daemon thread
        with self.log.open("w") as out:
            out.write("minute  busy %  (100 % = every core busy)\n")
            minute = 0
            while True:
                time.sleep(self.SAMPLE_S)
                now = cpu_times()
                minute += 1
                out.write(f"{minute:>6}  {busy_percent(self.last, now):>6.0f}\n")
                out.flush()
                self.last = now

    def summary(self) -> str:
        now = cpu_times()
        busy_s = (now[0] - self.first[0]) / os.sysconf("SC_CLK_TCK")
        return (
            f"the {os.cpu_count()} cores were busy {busy_percent(self.first, now):.0f} % of the "
            f"run ({busy_s / 60:.0f} core-minutes; per minute: {rel(self.log)})"
        )


def cpu_times() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot; iowait counts as idle."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def busy_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total else 0.0


def say(line: str) -> None:
    print(f">> {line}", flush=True)


def main() -> int:
    # A shell without job control starts background commands with SIGINT ignored, and an
    # ignored signal stays ignored in every child: the lanes' pytest would then never see the
    # interrupt forward_interrupts sends them (seen: `.ci/run &` from a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    LOGS.mkdir(parents=True, exist_ok=True)
    sampler = CpuSampler(LOGS / "cpu.log")
    sampler.start()
    env = dict(os.environ)
    prepare = None
    if os.geteuid() == 0:
        PREPARE_LOG.parent.mkdir(exist_ok=True)
        say(f"the lab's and kind's builds, in the background (log: {rel(PREPARE_LOG)})")
        with PREPARE_LOG.open("wb") as log:
            prepare = subprocess.Popen(
                [sys.executable, "tests/lab/kind_images.py", "prepare"],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C must not stop a debootstrap halfway
            )
        weigh_group(prepare.pid, BUILDS_GROUP_NICE)
        env["HPCOPS_KIND_PREPARE_PID"] = str(prepare.pid)  # the pytest lanes start none
    began = time.monotonic()
    make = ["make", "--no-print-directory"]
    setup = subprocess.run([*make, "setup"], cwd=REPO, env=env, check=False)
    say(f"setup took {time.monotonic() - began:.0f} s")
    lanes = []
    if setup.returncode == 0:
        pytest = [str(REPO / ".venv/bin/pytest"), "--durations=25"]
        lanes = [
            Lane(
                "lint, sanity and the build checks",
                ["nice", "-n", "19", *make, *CHECKS],
                LOGS / "checks.log",
            ),
            Lane(
                "the Slurm lab",
                [*pytest, "--phases=slurm", "tests/integration"],
                LOGS / "slurm.log",
            ),
            Lane(
                "the kind scenarios",
                [*pytest, "--phases=kind", "tests/integration"],
                LOGS / "kind.log",
            ),
            Lane(
                "the unit tests, the Kubernetes lab and the node_prep hosts",
                [*pytest, f"--phases={MAIN_PHASES}", "tests/unit", "tests/integration"],
            ),
        ]
        run_lanes(lanes, env)
    if prepare is not None:
        _code, prepare_cpu_s = wait_with_cpu(prepare)
        for line in PREPARE_LOG.read_text(errors="replace").splitlines():
            if "ready in" in line:
                say(f"the builds: {line}")
        say(f"the builds took {prepare_cpu_s / 60:.1f} core-minutes")
    for lane in lanes:
        say(
            f"{lane.name}: {lane.result} in {lane.took / 60:.1f} min, "
            f"{lane.cpu_s / 60:.1f} core-minutes"
        )
    say(sampler.summary())
    if setup.returncode != 0:
        say(f"setup FAILED (exit {setup.returncode})")
        return setup.returncode
    return next((lane.returncode for lane in lanes if lane.returncode), 0) or 0


def weigh_group(pid: int, nice: int) -> None:
    """The scheduling weight of the session group `pid` leads (sched(7), "The autogroup
    feature"); a kernel without autogroup shares the CPU per process, as before."""
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            say("the builds share the CPU per process (kernel.sched_autogroup_enabled is 0)")
            return
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError as error:
        say(f"the builds share the CPU per process (autogroup: {error.strerror})")
        return
    say(f"the builds' session group has the weight of niceness {nice}")


def run_lanes(lanes: list[Lane], env: dict[str, str]) -> None:
    """Start every lane, report the background ones as they end, then print their logs."""
    background = [lane for lane in lanes if lane.log]
    for lane in lanes:
        if lane.log:
            say(f"{lane.name}: in the background (log: {rel(lane.log)})")
        lane.start(env)

    def report(lane: Lane) -> None:
        lane.wait()
        say(f"{lane.name}: {lane.result} in {lane.took / 60:.1f} min (log: {rel(lane.log)})")

    watchers = [threading.Thread(target=report, args=(lane,)) for lane in background]
    for watcher in watchers:
        watcher.start()
    forward_interrupts(lanes)
    for lane in lanes:
        if not lane.log:
            lane.wait()
    for watcher in watchers:
        watcher.join()
    for lane in background:
        assert lane.log is not None
        say(f"{lane.name} ({rel(lane.log)}):")
        sys.stdout.write(lane.log.read_text(errors="replace"))
        sys.stdout.flush()


def forward_interrupts(lanes: list[Lane]) -> None:
    """A SIGTERM (CI's timeout) reaches the lanes as the Ctrl-C pytest and make clean up on.

    A Ctrl-C on the terminal reaches them already; here it must not end the wait for them.
    """

    def interrupt(_signum: int, _frame: object) -> None:
        for lane in lanes:
            if lane.process is not None and lane.process.poll() is None:
                lane.process.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def rel(path: Path | None) -> str:
    return str(path.relative_to(REPO)) if path else "-"


if __name__ == "__main__":
    sys.exit(main())
