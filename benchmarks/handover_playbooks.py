# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What lend.yml and reclaim.yml cost around their work: ansible-playbook's wall time
against the run's own.

    make lab-up && .venv/bin/python benchmarks/handover_playbooks.py [--trials 3] [--many 24]

Runs in the lab (the site is deployed first if it is not). It adds kwok nodes
bench01..benchNN to the interactive pool (as handover_reclaim.py does) and removes them at
the end. Per trial, lend.yml then reclaim.yml with handover_nodes, for one node and for
--many nodes, each with ansible.posix's profile_tasks; printed per case: the playbook's wall
time, the run's duration_s (its summary: from naming the run to its record), the slowest
node's handover as node_handover measured it, and wall minus that (what the playbook costs
around the work), then the slowest tasks of the last trial.

Target (issue 31): wall time at most 3 s above the work, for 1 and for 24 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (
    REPO / ".build" / "collections",
    REPO / "tests" / "lab",
    REPO / "tests" / "integration",
    REPO / "benchmarks",
):
    sys.path.insert(0, str(path))

from _common import figure, median, table  # noqa: E402
from ansible_runner import LAB_INVENTORY, ansible_env  # noqa: E402
from handover_pool import POLICY  # noqa: E402
from handover_reclaim import BENCH_LABEL, Bench, deployed_lab  # noqa: E402

PLAYBOOKS = REPO / "playbooks"
# profile_tasks' recap: "<task name> ---- 1.23s"
TASK_TIME = re.compile(r"^(.+?) -{2,} (\d+\.\d+)s$")


def command(playbook: str, extra: dict) -> list[str]:
    """ansible-playbook on the lab's inventory with these extra variables."""
    ansible = str(REPO / ".venv" / "bin" / "ansible-playbook")
    return [
        ansible,
        "-i",
        str(LAB_INVENTORY),
        str(PLAYBOOKS / f"{playbook}.yml"),
        "-e",
        json.dumps(extra),
    ]


def run(playbook: str, nodes: list[str], summary: Path) -> tuple[float, dict, list]:
    """One playbook run: wall seconds, its summary, its tasks' times (slowest first)."""
    extra = {
        "handover_nodes": nodes,
        "handover_summary_path": str(summary),
        "handover_policy": {**POLICY, "pool_selector": {BENCH_LABEL: "true"}},
        "handover_max_parallel": max(len(nodes), 1),
    }
    env = ansible_env(
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
        PROFILE_TASKS_TASK_OUTPUT_LIMIT="12",
    )
    started = time.monotonic()
    proc = subprocess.run(
        command(playbook, extra), env=env, capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{playbook}.yml failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    tasks = [
        (match.group(1).strip(), float(match.group(2)))
        for line in proc.stdout.splitlines()
        if (match := TASK_TIME.match(line.strip()))
    ]
    return wall, json.loads(summary.read_text()), tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--many", type=int, default=24)
    args = parser.parse_args()
    lab = deployed_lab()
    if lab is None:
        return 2
    bench = Bench(lab, max(args.many, 1))
    bench.up()
    os.environ["KUBECONFIG"] = str(lab.kubeconfig_path)
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    slowest: dict[tuple[str, int], list] = {}
    with tempfile.TemporaryDirectory() as scratch:
        summary = Path(scratch) / "summary.json"
        try:
            for count in (1, args.many):
                nodes = bench.names[:count]
                for trial in range(args.trials):
                    for playbook in ("lend", "reclaim"):
                        wall, done, tasks = run(playbook, nodes, summary)
                        work = max(
                            (
                                float(seconds)
                                for seconds in (done.get("node_seconds") or {}).values()
                            ),
                            default=float(done["duration_s"]),
                        )
                        results.setdefault((playbook, count), []).append(
                            (wall, float(done["duration_s"]), work)
                        )
                        slowest[(playbook, count)] = tasks
                        print(
                            f"{playbook} {count} node(s), trial {trial + 1}: wall {wall:.1f} s, "
                            f"run {done['duration_s']:.1f} s",
                            flush=True,
                        )
        finally:
            # Whatever a failed trial left lent goes back before its Node goes.
            policy = {**POLICY, "pool_selector": {BENCH_LABEL: "true"}}
            subprocess.run(
                command("reclaim", {"handover_nodes": bench.names, "handover_policy": policy}),
                env=ansible_env(),
                capture_output=True,
                check=False,
            )
            for name in bench.names:
                lab.request("DELETE", f"/api/v1/nodes/{name}")
    rows = [("case", "trials", "wall s", "run s", "work s", "wall - work s", "target")]
    for (playbook, count), trials in results.items():
        walls, runs, works = zip(*trials, strict=True)
        rows.append(
            (
                f"{playbook}.yml, {count} node(s)",
                str(len(trials)),
                figure(median(walls), 1),
                figure(median(runs), 1),
                figure(median(works), 1),
                figure(median(w - k for w, k in zip(walls, works, strict=True)), 1),
                "<= 3",
            )
        )
    table(rows)
    for (playbook, count), tasks in slowest.items():
        print(f"\nslowest tasks of {playbook}.yml, {count} node(s), last trial:")
        for name, seconds in tasks[:8]:
            print(f"  {seconds:6.2f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
