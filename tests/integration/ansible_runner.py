# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the collection's modules and plugins the way users do: through ansible-playbook.

Each call writes a one-task playbook, runs it with the JSON callback and returns the
task's result, so integration tests exercise AnsiballZ, argument validation, no_log and
check mode exactly as a real run does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import typing as t
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
UPGRADE = REPO / "playbooks" / "upgrade.yml"
LAB_INVENTORY = REPO / "inventories" / "lab"
COLLECTIONS = REPO / ".build" / "collections"
BIN = Path(sys.executable).parent


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="true",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="true",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    # The tests pass credentials explicitly; none may leak in from the caller's shell.
    for name in ("SLURM_JWT", "SLURMRESTD_URL", "SLURM_JWT_KEY_PATH"):
        env.pop(name, None)
    env.update(extra)
    return env


class TaskResult(dict[str, t.Any]):
    """A task's result, plus the whole output of the run (to look for leaked secrets)."""

    output: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.get("failed"))


def run_task(
    module: str,
    args: dict[str, t.Any],
    *,
    check: bool = False,
    diff: bool = False,
    env: dict[str, str] | None = None,
) -> TaskResult:
    """Run `module` with `args` on localhost and return its result."""
    play = [
        {
            "name": "integration test",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "module under test", module: args, "ignore_errors": True}],
        }
    ]
    run = run_play(play, check=check, diff=diff, env=env)
    try:
        result = TaskResult(run.report["plays"][0]["tasks"][0]["hosts"]["localhost"])
    except (KeyError, IndexError):
        raise AssertionError(f"ansible-playbook gave no task result:\n{run.output}") from None
    result.output = run.output
    return result


def run_play(
    play: list[dict[str, t.Any]],
    *,
    check: bool = False,
    diff: bool = False,
    env: dict[str, str] | None = None,
) -> PlaybookRun:
    """Run a playbook given as data on localhost."""
    with tempfile.TemporaryDirectory(prefix="hpcops-it-") as tmp:
        playbook = Path(tmp) / "play.yml"
        playbook.write_text(yaml.safe_dump(play))
        return ansible_playbook(
            ["-i", "localhost,", "-c", "local", str(playbook)],
            check=check,
            diff=diff,
            env=ansible_env(**(env or {})),
            timeout=300,
        )


def inventory_list(inventory_file: Path, env: dict[str, str] | None = None) -> dict[str, t.Any]:
    """`ansible-inventory --list` of one inventory source, parsed."""
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(inventory_file), "--list"],
        capture_output=True,
        text=True,
        # A source that does not parse must fail the test, not yield an empty inventory.
        env=ansible_env(ANSIBLE_INVENTORY_UNPARSED_FAILED="true", **(env or {})),
        check=False,
        timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"ansible-inventory failed ({proc.returncode}):\n{proc.stderr}")
    # ansible-core marks values from inventory plugins as not to be templated:
    # {"__ansible_unsafe": value}. The tests compare the values themselves.
    inventory: dict[str, t.Any] = json.loads(
        proc.stdout, object_hook=lambda obj: obj.get("__ansible_unsafe", obj)
    )
    return inventory


class PlaybookRun:
    """The JSON report of one ansible-playbook run: stats, failure messages, whole output."""

    def __init__(self, returncode: int, report: dict[str, t.Any], output: str) -> None:
        self.returncode = returncode
        self.report = report
        self.output = output

    def stats(self, host: str = "localhost") -> dict[str, int]:
        stats: dict[str, int] = self.report.get("stats", {}).get(host, {})
        return stats

    @property
    def changed(self) -> int:
        return self.stats().get("changed", 0)

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    def failures(self) -> list[str]:
        """The msg of every failed task result."""
        messages = []
        for play in self.report.get("plays", []):
            for task in play.get("tasks", []):
                for result in task.get("hosts", {}).values():
                    if result.get("failed") and not result.get("ignore_errors"):
                        messages.append(str(result.get("msg", "")))
        return messages

    def task_results(self, name: str) -> list[dict[str, t.Any]]:
        """Every host's result of each task called `name`, in run order."""
        return [
            result
            for play in self.report.get("plays", [])
            for task in play.get("tasks", [])
            if task["task"]["name"] == name
            for result in task.get("hosts", {}).values()
        ]

    def task_names(self) -> list[str]:
        return [
            task["task"]["name"]
            for play in self.report.get("plays", [])
            for task in play.get("tasks", [])
        ]

    def changed_tasks(self) -> list[str]:
        return [
            task["task"]["name"]
            for play in self.report.get("plays", [])
            for task in play.get("tasks", [])
            if any(r.get("changed") for r in task.get("hosts", {}).values())
        ]


def run_playbook(
    playbook: Path,
    inventory: Path,
    *,
    extra_vars: dict[str, t.Any] | None = None,
    check: bool = False,
    diff: bool = False,
    timeout: float = 900,
    env: dict[str, str] | None = None,
    tags: str | None = None,
) -> PlaybookRun:
    """ansible-playbook as a user runs it, with extra variables from a file (and extra
    environment variables, and --tags, when given)."""
    with tempfile.TemporaryDirectory(prefix="hpcops-it-") as tmp:
        args = ["-i", str(inventory), str(playbook)]
        if tags:
            args += ["--tags", tags]
        if extra_vars:
            vars_file = Path(tmp) / "extra-vars.yml"
            vars_file.write_text(yaml.safe_dump(extra_vars))
            args += ["-e", f"@{vars_file}"]
        return ansible_playbook(
            args, check=check, diff=diff, env=ansible_env(**(env or {})), timeout=timeout
        )


def ansible_playbook(
    args: list[str], *, check: bool, diff: bool, env: dict[str, str], timeout: float
) -> PlaybookRun:
    """Run ansible-playbook with the JSON callback and parse its report."""
    command = [str(BIN / "ansible-playbook"), *args]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, check=False, timeout=timeout
    )
    try:
        report: dict[str, t.Any] = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"ansible-playbook gave no JSON report (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        ) from None
    return PlaybookRun(proc.returncode, report, proc.stdout + proc.stderr)


def deploy_site_unless_deployed(lab: t.Any) -> None:
    """Run site.yml on the Kubernetes lab `lab` unless it already has NodeSets (benchmarks
    reuse a deployed lab; a run on one changes nothing but takes about 30 s)."""
    status, body = lab.request("GET", "/apis/slinky.slurm.net/v1beta1/nodesets")
    if status == 200 and body["items"]:
        return
    print("deploying the site (playbooks/site.yml) ...", flush=True)
    run = run_playbook(SITE, LAB_INVENTORY)
    if run.failed:
        raise RuntimeError(f"site.yml failed: {run.failures()}")
