# SPDX-License-Identifier: GPL-3.0-or-later
"""molecule's kind scenarios with images built here, on one cluster, as `make test` runs them.

``molecule test -s default -s handover -s autoscale``: the default scenario owns the kind
cluster of real kubelets and containers (``shared_state``), so molecule makes it once with the
default scenario's create, runs the three scenarios on it and deletes it with its destroy,
which checks that no container, volume, network, mount or iptables rule is left.  The
default scenario runs site.yml twice (the second run must change nothing) with cert-manager,
the Slinky webhook and KEDA, runs Slurm jobs in the slurmd containers and checks their cgroup
limits (molecule/default/tests); the handover scenario then lends, reclaims and rebalances
the interactive workers, with runs stopped after a step and resumed (molecule/handover/tests);
the autoscale scenario runs site.yml with the Slurm pool autoscaled from zero and watches KEDA
scale it out and back on both metric paths (molecule/autoscale/tests).

Here nothing can be pulled, so the images come from ``tests/lab/kind_images.py`` (built
once, cached in $HPCOPS_LAB_CACHE) and the scenarios run with HPCOPS_KIND_IMAGES=local.
dockerd is started for the module when it does not run yet and stopped afterwards, and
its stop is checked to restore the firewall as it was. node_prep's hosts (the other pytest
process of `make test`) share it meanwhile: the destroy leaves their containers' mounts and
networks' rules out of its check, and the machine's inotify limits are put back by the last
user of dockerd (docker_fixtures.py).  The Slinky release and the time of
each scenario's phases are printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
import k8s_binaries
import kind_images
from docker_engine import firewall_snapshot
from docker_fixtures import SessionEngine
from toolbox import LabError

REPO = Path(__file__).resolve().parents[2]
# A guard against a hang: a cold `make test` runs the scenarios beside the other lanes, on a
# CPU they keep busy (38.9 min in CI on 2026-11-28, 43 min on a slow cold machine), and
# create waits there for the images' Go builds (up to about 30 min more).
MOLECULE_TIMEOUT_S = 80 * 60

pytest_plugins = ["docker_fixtures"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="dockerd and kind need root"),
]


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


@pytest.fixture(scope="module")
def node_image(docker_engine: SessionEngine) -> str:
    """The node image and kind: the cluster needs no more. molecule's create builds the
    images it loads (create_kind.yml), while the background builds of a cold run go on."""
    started = time.monotonic()
    try:
        ref = kind_images.ensure(["kind-node"])["kind-node"]
        kind_images.stage_binaries()
    except LabError as err:
        pytest.fail(f"building the kind node image failed: {err}", pytrace=False)
    print(f"\nthe kind node image {ref} ready in {minutes(time.monotonic() - started)}")
    return ref


# What the scenarios' log says that is worth a line in the test report.
REPORTED = re.compile(
    r"job \d+ on .*memory|\.yml.*: rc \d+ in |slurmd pods while|slurmd pod gone|PASSED|FAILED"
    r"|after submission; KEDA|while job \d+ runs|keda_metrics_source="
)
# molecule's own failures, which no task reports (e.g. "Idempotence test failed because of").
IDEMPOTENCE_FAILED = "Idempotence test failed"
MOLECULE_COMPLAINT = re.compile(rf"^(CRITICAL|ERROR)\b|{IDEMPOTENCE_FAILED}")
# In the order molecule runs them: the default scenario first, as a plain `molecule test`.
SCENARIOS = ("default", "handover", "autoscale")


def molecule(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """A molecule command with the local images; its output (one stream) and seconds taken."""
    env = {
        **os.environ,
        "HPCOPS_KIND_IMAGES": "local",
        "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}",
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }
    started = time.monotonic()
    # A session of its own, so that a timeout stops its ansible-playbook and kubectl too.
    process = subprocess.Popen(
        ["molecule", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, so each playbook time follows its action
        text=True,
        start_new_session=True,
    )
    try:
        stdout = process.communicate(timeout=MOLECULE_TIMEOUT_S)[0]
        proc = subprocess.CompletedProcess(process.args, process.returncode, stdout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output = process.communicate()[0]
        # What it did until then, and how long each step took, or nobody can say why.
        log = REPO / ".kind/molecule-test.log"
        log.write_text(output)
        steps = "\n".join(f"  {s:<10}{a:<12}{t}" for s, a, t in action_times(output))
        # The cluster it stopped in its middle goes too: no container is left running.
        destroyed = subprocess.run(
            ["molecule", "destroy"], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=600, check=False,
        ).returncode  # fmt: skip
        pytest.fail(
            f"molecule {' '.join(args)} still ran after {minutes(MOLECULE_TIMEOUT_S)} "
            f"(log: {log.relative_to(REPO)}; molecule destroy after it: exit {destroyed}); "
            f"the steps it ended:\n{steps}\n" + "\n".join(output.splitlines()[-30:]),
            pytrace=False,
        )
    return proc, time.monotonic() - started


def test_the_kind_scenarios_pass_offline_on_one_cluster(node_image: str) -> None:
    # A cluster an interrupted run left behind would be reused: start from none.
    cleared, cleared_s = molecule("destroy")
    assert cleared.returncode == 0, "\n".join(cleared.stdout.splitlines()[-40:])
    selection = [arg for name in SCENARIOS for arg in ("-s", name)]
    proc, took = molecule("test", *selection)
    output = proc.stdout
    log = REPO / ".kind/molecule-test.log"
    log.write_text(output)
    prepared = REPO / ".kind/prepare.log"  # the background builds (conftest.py)
    if prepared.exists():
        print("\n" + "\n".join(prepared.read_text().splitlines()[-12:]))
    times = k8s_binaries.load_build_times(kind_images.BUILD_TIMES)
    print(f"\nthe kind images' last build of each (s): {times}")
    slinky_version = REPO / ".kind/slinky-version"  # written by create's build
    slinky = slinky_version.read_text().strip() if slinky_version.exists() else "?"
    print(
        f"\nkind runs Slinky {slinky} (.kind/slinky-version); molecule destroy of a leftover "
        f"cluster {minutes(cleared_s)}\nmolecule test {' '.join(selection)}: exit "
        f"{proc.returncode} in {minutes(took)} (log: {log.relative_to(REPO)})"
    )
    times = action_times(output)
    for scenario, action, took_text in times:
        print(f"  {scenario:<10}{action:<12}{took_text}")
    for line in output.splitlines():
        if REPORTED.search(line):
            print("  " + line.strip().strip('",'))
    if proc.returncode != 0:
        # The failed tasks come last, and no assertion's repr after them: a report cut in
        # its middle (CI shows the end) keeps them.
        failures = "\n".join(f"{task}\n  {fatal}" for task, fatal in failed_tasks(output))
        pytest.fail(
            "\n".join(output.splitlines()[-40:])
            + f"\nmolecule test exited {proc.returncode}; the tasks that failed:\n{failures}",
            pytrace=False,
        )
    # One cluster for both: the default scenario's create and destroy ran, nobody else's.
    shared = [
        (scenario, action)
        for scenario, action, _seconds in times
        if action in ("create", "destroy")
    ]
    assert shared == [("default", "create"), ("default", "destroy")], shared
    assert {scenario for scenario, action, _seconds in times if action == "verify"} == set(
        SCENARIOS
    )


def action_times(output: str) -> list[tuple[str, str, str]]:
    """(scenario, molecule action, how long its playbook took) from molecule's output, in order."""
    times, scenario, action = [], "?", "?"
    for line in output.splitlines():
        # "default ➜ create: Executing" on a terminal, "[default > create] Executing" otherwise.
        started = re.search(r"(?:^|\s|\[)([\w-]+)(?: ➜ | > )(\w+)\]?:? Executing", line)
        if started:
            scenario, action = started.groups()
        took = re.search(r"Playbook run took (.+)", line)
        if took:
            times.append((scenario, action, took.group(1).strip()))
    return times


def failed_tasks(output: str, width: int = 2000) -> list[tuple[str, str]]:
    """(task header, its failure cut to width) for each task that failed in an Ansible log
    (a loop's items too), and molecule's own complaints (an idempotence check's); retries
    are not failures, and an ignored error is not one either."""
    failed, task = [], "?"
    lines = output.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith(("fatal: ", "failed: [")) and not any(
            later.startswith("...ignoring") for later in lines[number + 1 : number + 3]
        ):
            failed.append((task, line[:width]))
        elif MOLECULE_COMPLAINT.search(line):
            # The idempotence check lists the changed tasks on the lines after it.
            said = lines[number : number + 6] if IDEMPOTENCE_FAILED in line else [line]
            complaint = ("molecule", "\n  ".join(said)[:width])
            if complaint not in failed:  # molecule repeats its errors in its summary
                failed.append(complaint)
    return failed


def test_stopping_dockerd_puts_the_host_back(docker_engine: SessionEngine) -> None:
    """dockerd leaves its iptables chains and docker0 behind when it exits; down removes them.

    The last test module out stops it: this one, or node_prep's in the other pytest process
    of `make test` when it still uses dockerd (its leave runs the same down).
    """
    if not docker_engine.started_here:
        pytest.skip("dockerd was running before these tests; it stays up")
    before = docker_engine.state()["firewall"]
    assert docker_engine.status()["answering"]
    assert any("DOCKER" in rule for rule in firewall_snapshot()["iptables"])
    docker_engine.leave_last(timeout_s=30 * 60)  # LabError if something is left
    assert firewall_snapshot() == before
    assert not docker_engine.status()["answering"]
