# SPDX-License-Identifier: GPL-3.0-or-later
"""`molecule test -s kind` and `-s handover` with images built here, as `make test` runs them.

Each scenario makes a kind cluster of real kubelets and containers and runs site.yml on it.
The kind scenario runs it twice (the second run must change nothing), runs Slurm jobs in
the slurmd containers and checks their cgroup limits (molecule/kind/tests); the handover
scenario lends, reclaims and rebalances the interactive workers, with runs stopped after a
step and resumed (molecule/handover/tests).  Each destroys its cluster, checking that no
container, volume, network, mount or iptables rule is left.

Here nothing can be pulled, so the images come from ``tests/lab/kind_images.py`` (built
once, cached in $HPCOPS_LAB_CACHE) and the scenario runs with HPCOPS_KIND_IMAGES=local.
dockerd is started for the module when it does not run yet and stopped afterwards, and
its stop is checked to restore the firewall as it was.  Times are printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
import k8s_binaries
import kind_images
from docker_engine import firewall_snapshot
from docker_fixtures import SessionEngine
from toolbox import LabError

REPO = Path(__file__).resolve().parents[2]
MOLECULE_TIMEOUT_S = 40 * 60

pytest_plugins = ["docker_fixtures"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="dockerd and kind need root"),
]


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


@pytest.fixture(scope="module", autouse=True)
def machine_sysctls() -> Iterator[None]:
    """node_prep raises the machine's inotify limits (kind nodes share its kernel): put back."""
    names = ("fs/inotify/max_user_instances", "fs/inotify/max_user_watches")
    before = {name: Path("/proc/sys", name).read_text() for name in names}
    yield
    for name, value in before.items():
        Path("/proc/sys", name).write_text(value)


@pytest.fixture(scope="module")
def local_images(docker_engine: SessionEngine) -> dict[str, str]:
    started = time.monotonic()
    try:
        refs = kind_images.ensure()
    except LabError as err:
        pytest.fail(f"building the kind images failed: {err}", pytrace=False)
    kind_images.stage_checkout(refs)
    prepared = REPO / ".kind/prepare.log"  # the background preparation (conftest.py)
    if prepared.exists():
        print("\n" + "\n".join(prepared.read_text().splitlines()[-12:]))
    times = k8s_binaries.load_build_times(kind_images.BUILD_TIMES)
    print(
        f"\nkind images ready in {minutes(time.monotonic() - started)}; last build of each (s): {times}"
    )
    return refs


# What each scenario's log says that is worth a line in the test report.
REPORTED = {
    "kind": re.compile(r"job \d+ on .*memory"),
    "handover": re.compile(r"\.yml.*: rc \d+ in |slurmd pods while|PASSED|FAILED"),
}


@pytest.mark.parametrize("scenario", ["kind", "handover"])
def test_molecule_scenario_passes_offline(local_images: dict[str, str], scenario: str) -> None:
    env = {
        **os.environ,
        "HPCOPS_KIND_IMAGES": "local",
        "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}",
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }
    started = time.monotonic()
    proc = subprocess.run(
        ["molecule", "test", "-s", scenario],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, so each playbook time follows its action
        text=True,
        timeout=MOLECULE_TIMEOUT_S,
        check=False,
    )
    took = time.monotonic() - started
    output = proc.stdout
    log = REPO / f".kind/molecule-{scenario}.log"
    log.write_text(output)
    print(
        f"\nmolecule test -s {scenario}: exit {proc.returncode} in {minutes(took)} "
        f"(log: {log.relative_to(REPO)})"
    )
    for action, took_text in action_times(output):
        print(f"  {action:<12}{took_text}")
    for line in output.splitlines():
        if REPORTED[scenario].search(line):
            print("  " + line.strip().strip('",'))
    assert proc.returncode == 0, "\n".join(output.splitlines()[-60:])


def action_times(output: str) -> list[tuple[str, str]]:
    """(molecule action, how long its playbook took) from molecule's output, in order."""
    times, action = [], "?"
    for line in output.splitlines():
        # "kind ➜ create: Executing" on a terminal, "[kind > create] Executing" otherwise.
        started = re.search(r"(?:➜ |\[\w+ > )(\w+)\]?:? Executing", line)
        if started:
            action = started.group(1)
        took = re.search(r"Playbook run took (.+)", line)
        if took:
            times.append((action, took.group(1).strip()))
    return times


def test_stopping_dockerd_puts_the_host_back(docker_engine: SessionEngine) -> None:
    """dockerd leaves its iptables chains and docker0 behind when it exits; down removes them."""
    if not docker_engine.started_here:
        pytest.skip("dockerd was running before these tests; it stays up")
    before = docker_engine.state()["firewall"]
    assert docker_engine.status()["answering"]
    assert any("DOCKER" in rule for rule in firewall_snapshot()["iptables"])
    docker_engine.down()  # LabError if something is left
    assert firewall_snapshot() == before
    assert not docker_engine.status()["answering"]
