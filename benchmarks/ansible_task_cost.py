# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection costs Ansible per task: the CPU of importing its filter files, and of a
site.yml run that changes nothing.

    make lab-up && .venv/bin/python benchmarks/ansible_task_cost.py [--trials 3]

Ansible imports every filter file of a collection, compiled from its source, in the worker
process of each task that uses one of its filters (ansible-core 2.19's Jinja2Loader): what
those files import at their top is paid once per such task. Printed: the CPU of importing
each filter file in a fresh interpreter, Ansible's own filters and tests first as in a
worker; then, on the Kubernetes lab (the site is deployed first if it is not), site.yml
that changes nothing: its wall time and the CPU of ansible-playbook and everything it ran
(user + system), its tasks, and the slowest tasks (ansible.posix's profile_tasks).

Figures of 2026-11-29: the collection's filter files 0.30 s of CPU per worker before their
large imports moved into the filters, 0.05 s after (Ansible's own 0.12 s); site.yml that
changes nothing on the lab (121 tasks) 41 s of CPU before, 27 s after (0.23 s per task).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO / "tests" / "lab", REPO / "tests" / "integration", REPO / "benchmarks"):
    sys.path.insert(0, str(path))

from _common import figure, median, table  # noqa: E402
from ansible_runner import LAB_INVENTORY, SITE, ansible_env  # noqa: E402

COLLECTIONS = REPO / ".build" / "collections"
FILTERS = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py"))
# Run in a fresh interpreter: the CPU of loading Ansible's filters and tests, then of
# importing each of the collection's filter files (as a worker does, in name order).
IMPORTS = f"""
import importlib, time
from ansible.plugins.loader import init_plugin_loader, filter_loader, test_loader
init_plugin_loader([{str(COLLECTIONS)!r}])
began = time.process_time()
filter_loader.get("ansible.builtin.to_json")
test_loader.get("ansible.builtin.match")
print("ansible.builtin", time.process_time() - began)
for name in {FILTERS!r}:
    began = time.process_time()
    importlib.import_module(f"ansible_collections.hpcops.slinky.plugins.filter.{{name}}")
    print(name, time.process_time() - began)
"""
TASK_TIME = re.compile(r"^(.+?) -{2,} (\d+\.\d+)s$")
RECAP = re.compile(r"ok=(\d+)\s+changed=(\d+).*?skipped=(\d+)")


def filter_imports() -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, check=True
    ).stdout
    return {name: float(value) for name, value in (line.split() for line in out.splitlines())}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def site_run() -> tuple[float, float, str]:
    """site.yml on the lab: (wall s, CPU s of it and all it ran, its output)."""
    env = ansible_env(
        ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks"
    )
    cpu_before, began = children_cpu_s(), time.monotonic()
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(LAB_INVENTORY), str(SITE)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    wall, cpu = time.monotonic() - began, children_cpu_s() - cpu_before
    if proc.returncode != 0:
        raise SystemExit(f"site.yml failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}")
    return wall, cpu, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()

    trials = [filter_imports() for _trial in range(args.trials)]
    names = list(trials[0])
    print("importing the filter files in a fresh interpreter (CPU s, median of trials):")
    rows = [[name, figure(median([t[name] for t in trials]), 3)] for name in names]
    every_file = median([sum(t[name] for name in FILTERS) for t in trials])
    table([["what", "CPU s"], *rows, ["hpcops.slinky, every file", figure(every_file, 3)]])

    if "KUBECONFIG" not in os.environ:
        os.environ["KUBECONFIG"] = str(REPO / ".lab" / "kubeconfig")
    first = site_run()  # deploys the site if the lab has none, or changes nothing
    runs = [site_run() for _trial in range(args.trials)]
    recap = RECAP.search(runs[-1][2])
    tasks = sum(int(n) for n in (recap.group(1), recap.group(3))) if recap else 0
    changed = int(recap.group(2)) if recap else -1
    print(f"\nsite.yml on the lab after a first run ({first[0]:.0f} s): {args.trials} runs")
    cpu = median([run[1] for run in runs])
    table([
        ["wall s", "CPU s", "tasks (ok + skipped)", "changed", "CPU s per task"],
        [figure(median([run[0] for run in runs]), 1), figure(cpu, 1), str(tasks), str(changed),
         figure(cpu / tasks if cpu is not None and tasks else None, 3)],
    ])  # fmt: skip
    slowest = sorted(
        ((float(m.group(2)), m.group(1).strip()) for line in runs[-1][2].splitlines()
         if (m := TASK_TIME.match(line))),
        reverse=True,
    )[:8]  # fmt: skip
    print("\nslowest tasks of the last run:")
    table([["s", "task"], *([figure(s, 2), name] for s, name in slowest)])


if __name__ == "__main__":
    main()
