# SPDX-License-Identifier: GPL-3.0-or-later
"""The older Slinky line, and a real upgrade from it to the lab's release, in the lab.

A fresh lab gets site.yml on the proxy's release (1.1.0): a lend and a reclaim prove that
line still works. Then, with a Slurm job running on a dedicated node and another on a lent
node, upgrade.yml moves the running cluster to the lab's release (1.2.1, built from the
public sources beside the checkout): the jobs are not lost, the lent node stays lent with
its journal, slurm.conf holds what the collection restates on 1.2, and a second run changes
nothing. The module runs last among the Kubernetes tests (tests/integration/conftest.py),
so that on a cold machine the older operator builds while the others run; it starts from a
fresh lab whatever the modules before it left. Without the sources (the lab builds
1.1.0 only) the older line's test and the preflight to 1.2.2 still run; the upgrade is
skipped.
"""

from __future__ import annotations

import base64
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import LAB_INVENTORY, SITE, UPGRADE, PlaybookRun, run_playbook
from handover_pool import LENDABLE, Pool, keyed_pool
from k8s_binaries import LAB_SLINKY_VERSION, PROXY_SLINKY_VERSION, slinky_operator
from k8s_fixtures import wait_for_batch_nodes
from slurm_pods import SlinkyRest
from toolbox import LabError, pid_exe, wait_until

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.rollout import (
    nodeset_rollout_pending,
)

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

OLD = PROXY_SLINKY_VERSION.lstrip("v")
# Without a newer release built here the preflight still reports an upgrade to the newest
# 1.2 the collection deploys; only the upgrade itself needs the newer operator.
NEWER_BUILT = LAB_SLINKY_VERSION != PROXY_SLINKY_VERSION
NEW = LAB_SLINKY_VERSION.lstrip("v") if NEWER_BUILT else "1.2.2"
needs_newer = pytest.mark.skipif(
    not NEWER_BUILT,
    reason=f"the lab builds only Slinky {OLD}: no newer release to upgrade to (the public "
    "sources are not beside the checkout, tests/lab/k8s_binaries.py)",
)
JOB_SECONDS = 90
# Long enough for a job requeued by the upgrade to run again to its end.
JOB_DEADLINE_S = 2 * JOB_SECONDS + 120
ENDED_BADLY = {"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL"}


def operator_programs() -> set[str]:
    """The operator binaries running now (one per release, by the pod runner)."""
    found = set()
    for entry in Path("/proc").iterdir():
        exe = pid_exe(int(entry.name)) if entry.name.isdigit() else None
        if exe and Path(exe).name.startswith("slurm-operator-"):
            found.add(Path(exe.removesuffix(" (deleted)")).name)
    return found


def operator_image(lab: t.Any) -> str:
    pods = lab.get("/api/v1/namespaces/slinky/pods")["items"]
    (pod,) = [p for p in pods if p["metadata"]["name"].startswith("slurm-operator-")]
    return str(pod["spec"]["containers"][0]["image"])


def deploy(version: str) -> PlaybookRun:
    return run_playbook(SITE, LAB_INVENTORY, extra_vars={"slinky_version": version})


def upgrade(
    version: str,
    *,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    **settings: t.Any,
) -> PlaybookRun:
    return run_playbook(
        UPGRADE,
        LAB_INVENTORY,
        extra_vars={"slinky_version": version, **settings},
        check=check,
        diff=diff,
        tags=tags,
    )


def upgrade_report(run: PlaybookRun) -> dict[str, t.Any]:
    (result,) = run.task_results("Work out what the upgrade changes")
    report: dict[str, t.Any] = result["ansible_facts"]["slinky_upgrade_report"]
    return report


def slurm_answers_for(rest: SlinkyRest, names: tuple[str, ...]) -> bool:
    """slurmrestd answers and each named node is up (idle or running jobs)."""
    try:
        states = {n["name"]: set(n["state"]) for n in rest.get("nodes")["nodes"]}
    except LabError:  # slurmctld or slurmrestd (re)starting
        return False
    up = {"IDLE", "ALLOCATED", "MIXED"}
    down = {"DOWN", "NOT_RESPONDING", "FUTURE"}
    return all(up & states.get(name, set()) and not down & states[name] for name in names)


@pytest.fixture(scope="module")
def old_pool(k8s_lab: t.Any, secret_dirs: t.Any, request: pytest.FixtureRequest) -> Iterator[Pool]:
    """A fresh lab with site.yml of the older release, and its pool. A module after this
    one (in a run that selects it so) takes the upgraded site over, its jobs cancelled
    (site.yml then changes little); a fresh lab again when a test here failed, so what a
    failed upgrade left behind never reaches it."""
    failed_before = request.session.testsfailed
    k8s_lab.down()  # whatever an earlier module deployed: this one starts as a new site
    k8s_lab.up(every_release=True)  # the older line's operator and charts too
    run = deploy(OLD)
    assert not run.failed, f"site.yml {OLD} failed: {run.failures()}\n{run.output[-3000:]}"
    rest = SlinkyRest.of_cluster(k8s_lab)
    wait_for_batch_nodes(rest, k8s_lab)
    with secret_dirs("upgrade") as keys:  # the key goes with the fixture (tests/conftest.py)
        pool = keyed_pool(k8s_lab, rest, keys)
        yield pool
        if request.session.testsfailed > failed_before:
            k8s_lab.down()
            k8s_lab.up()
            return
        for job in pool.slurm.get("jobs")["jobs"]:
            if not {"COMPLETED", "CANCELLED", "FAILED"} & set(job["job_state"]):
                pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job['job_id']}")


def test_the_older_line_deploys_lends_and_reclaims(old_pool: Pool) -> None:
    pool = old_pool
    assert operator_image(pool.lab).endswith(f":{OLD}")
    assert operator_programs() == {slinky_operator(f"v{OLD}").path.name}
    helm = pool.lab.get("/api/v1/namespaces/slurm/secrets?labelSelector=owner%3Dhelm")["items"]
    assert {s["metadata"]["labels"]["name"] for s in helm} == {"slurm"}

    run = pool.playbook("lend", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    assert pool.journal("int01")["state"] == "lent"
    assert pool.idle_slurm_node("int01")["partitions"] == ["backfill"]
    run = pool.playbook("reclaim", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    pool.assert_clean("int01")


def test_the_upgrade_preflight_reports_what_changes_and_changes_nothing(old_pool: Pool) -> None:
    before = old_pool.lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")["items"]
    run = upgrade(NEW, check=True, diff=True, tags="preflight")
    assert not run.failed, run.failures()
    report = upgrade_report(run)
    assert report["installed"] == {"crds": OLD, "operator": OLD, "slurm": OLD}
    assert report["wanted"] == NEW and not report["refusals"] and not report["dropped_nodesets"]
    # The dedicated NodeSets' nodes are drained before the new operator replaces their pods.
    assert report["drain_nodesets"] == ["burst", "hpc"]
    changes = "\n".join(report["changes"])
    for expected in (
        "NodeSet field taintKubeNodes (set on burst, hpc, interactive, interactive-a100) is "
        "not in Slinky 1.2",
        "Slinky 1.2 no longer writes these slurm.conf settings; the collection restates them",
        "SlurmctldParameters=enable_stepmgr",
        "controller.inplaceReconfigure: false",
        "the Slinky 1.2 operator replaces every slurmd pod of NodeSets burst, hpc",
        "DaemonSet NodeSets interactive, interactive-a100 (lent nodes) are replaced at once",
    ):
        assert expected in changes, changes
    # --diff shows the values as installed and as the upgrade would set them.
    (diff,) = run.task_results("Compare the Slurm cluster's values")
    shown = str(diff.get("diff", ""))
    assert "taintKubeNodes" in shown and "inplaceReconfigure" in shown, shown[:2000]
    after = old_pool.lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")["items"]
    assert [s["metadata"]["resourceVersion"] for s in after] == [
        s["metadata"]["resourceVersion"] for s in before
    ]


def job_states(pool: Pool, job_id: int) -> tuple[list[str], int]:
    job = pool.job(job_id)
    return job["job_state"], int(job.get("restart_cnt") or 0)


@needs_newer
def test_an_upgrade_whose_drain_outlasts_its_timeout_stops_and_takes_the_drains_back(
    old_pool: Pool,
) -> None:
    pool = old_pool
    before = pool.lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")["items"]
    job = pool.submit(None, 600, partition="batch")
    # The Slurm modules of the drain read their token from a Secret, as a site's scheduled
    # runs do (handover_slurm_token_secret).
    token = base64.b64encode(pool.slurm.token("slurm", lifespan=600).encode()).decode()
    secrets = "/api/v1/namespaces/slurm/secrets"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upgrade-token"}}
    status, body = pool.lab.request("POST", secrets, {**secret, "data": {"auth-token": token}})
    assert status == 201, body
    try:
        run = upgrade(
            NEW,
            slinky_upgrade_drain_timeout_s=10,
            handover_slurm_token_secret={"namespace": "slurm", "name": "upgrade-token"},
            handover_slurm_user="slurm",
        )
        assert run.failed
        on = pool.job(job)["nodes"]
        failures = "\n".join(run.failures())
        assert (
            f"the jobs {job} still ran on {on} after 10 s (slinky_upgrade_drain_timeout_s): "
            "nothing was upgraded and the drains are taken back" in failures
        ), failures
        # Nothing upgraded, no drain of ours left, the job runs on.
        after = pool.lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")["items"]
        assert [s["metadata"]["resourceVersion"] for s in after] == [
            s["metadata"]["resourceVersion"] for s in before
        ]
        assert operator_image(pool.lab).endswith(f":{OLD}")
        for node in ("hpc-0", "hpc-1"):
            state = pool.slurm.get(f"node/{node}")["nodes"][0]
            assert "DRAIN" not in state["state"] and not state["reason"], state
        assert pool.job(job)["job_state"] == ["RUNNING"]
    finally:
        pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job}")
        pool.lab.request("DELETE", f"{secrets}/upgrade-token")


def settled_then_lent(pool: Pool, run: PlaybookRun) -> int:
    """The upgrade ended settled: every NodeSet rolled out, the drained nodes up and
    undrained at once (no wait here), and it said how long that took. Then a lend right
    after it: the node joins Slurm and takes a job (its id returned)."""
    nodesets = pool.lab.get("/apis/slinky.slurm.net/v1beta1/namespaces/slurm/nodesets")["items"]
    assert nodeset_rollout_pending(nodesets) == [], nodesets
    assert slurm_answers_for(pool.slurm, ("hpc-0", "hpc-1"))
    for node in ("hpc-0", "hpc-1"):
        state = pool.slurm.get(f"node/{node}")["nodes"][0]
        assert "DRAIN" not in state["state"], state
    (settled,) = run.task_results("Say how long the cluster took to settle")
    print(settled["msg"])
    assert "take jobs again" in settled["msg"], settled

    run = pool.playbook("lend", handover_nodes=["int02"])
    assert not run.failed, run.failures()
    assert pool.journal("int02")["state"] == "lent"
    assert pool.idle_slurm_node("int02")["partitions"] == ["backfill"]
    return pool.submit("int02", 5)


@needs_newer
def test_upgrade_keeps_the_jobs_and_the_lent_node(old_pool: Pool) -> None:
    pool = old_pool
    run = pool.playbook("lend", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    pool.idle_slurm_node("int01")
    # Jobs as users submit them: a partition, no node named (a job pinned to a node that
    # the upgrade takes out is dropped by slurmctld: "Invalid req_nodes").
    lent_job = pool.submit(None, JOB_SECONDS)
    batch_job = pool.submit(None, JOB_SECONDS, partition="batch")
    assert pool.job(lent_job)["nodes"] == "int01"

    started = time.monotonic()
    run = upgrade(NEW)
    took = time.monotonic() - started
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    print(f"upgrade.yml {OLD} -> {NEW} took {took:.0f} s")

    # The operator of the new release runs; the JWT key (and so every token) is kept.
    assert operator_image(pool.lab).endswith(f":{NEW}")
    wait_until(
        lambda: operator_programs() == {slinky_operator(f"v{NEW}").path.name},
        60,
        f"only the {NEW} operator to run",
    )
    assert SlinkyRest.of_cluster(pool.lab).jwt_key == pool.slurm.jwt_key

    after_lend_job = settled_then_lent(pool, run)

    # slurm.conf holds what the collection restates on 1.2.
    config = pool.lab.get("/api/v1/namespaces/slurm/configmaps/slurm-config")["data"]
    lines = set(config["slurm.conf"].splitlines())
    for setting in (
        "ReturnToService=2",
        "GresTypes=gpu",
        "SelectTypeParameters=CR_Core_Memory",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "PrologFlags=Contain",
        "JobAcctGatherType=jobacct_gather/cgroup",
    ):
        assert setting in lines, (setting, sorted(lines))

    # The dedicated nodes were drained for the upgrade, so the batch job ran to its end
    # before its pod was replaced, and they take jobs again.
    (drain,) = run.task_results("hpcops.slinky.handover : Drain the nodes")
    assert sorted(n["name"] for n in drain["nodes"]) == ["hpc-0", "hpc-1"], drain["nodes"]
    assert job_states(pool, batch_job) == (["COMPLETED"], 0)
    # Resumed by the run, or back with no drain at all (a replaced pod's node record may
    # be deleted and registered anew): either way, no drain of ours is left. A record that
    # outlived its pod keeps our DRAIN under the preStop's reason: that one is resumed too.
    (waited,) = run.task_results(
        "hpcops.slinky.handover : Wait for a new slurmd on each drained node"
    )
    print(
        "after the upgrade:",
        [(n["name"], n["state"], n["state_flags"], n["reason"]) for n in waited["nodes"]],
    )
    (resume,) = run.task_results("hpcops.slinky.handover : Resume them")
    assert {n["name"] for n in resume.get("nodes", [])} <= {"hpc-0", "hpc-1"}, resume
    renamed = {
        n["name"]
        for n in waited["nodes"]
        if "DRAIN" in n["state_flags"] and n["reason"] == "slurm-operator: Pod is terminating"
    }
    (resume_renamed,) = run.task_results(
        "hpcops.slinky.handover : Resume those whose reason the replaced pod's preStop overwrote"
    )
    assert {n["name"] for n in resume_renamed.get("nodes", [])} == renamed, resume_renamed
    for node in ("hpc-0", "hpc-1"):
        state = pool.slurm.get(f"node/{node}")["nodes"][0]
        assert "upgrade" not in state["reason"], state

    # Neither job is lost: each runs on, or was requeued and runs again, to its end.
    seen: dict[int, tuple[list[str], int]] = {}

    def ended() -> bool:
        before = dict(seen)
        for job_id in (batch_job, lent_job, after_lend_job):
            seen[job_id] = job_states(pool, job_id)
        if seen != before:  # what the upgrade did to them, for the report
            print(f"{time.monotonic() - started:.0f} s after the upgrade began: {seen}")
        return all("COMPLETED" in states for states, _restarts in seen.values())

    wait_until(ended, JOB_DEADLINE_S, "both jobs to complete")
    for job_id, (states, restarts) in seen.items():
        assert not ENDED_BADLY & set(states), (job_id, states)
        print(f"job {job_id}: {states}, restarted {restarts} time(s)")

    # The lent node is still lent, its journal and marks agree, Slurm has it in backfill;
    # the reclaim then gives both lent nodes back cleanly.
    assert pool.journal("int01")["state"] == "lent"
    assert pool.marks("int01") == (True, True)
    assert pool.idle_slurm_node("int01")["partitions"] == ["backfill"]
    run = pool.playbook("reclaim", handover_nodes=list(LENDABLE))
    assert not run.failed, run.failures()
    for name in LENDABLE:
        pool.assert_clean(name)
    for name in LENDABLE:
        assert pool.journal(name)["state"] == "free"


@needs_newer
def test_a_second_upgrade_changes_nothing(old_pool: Pool) -> None:
    run = upgrade(NEW)
    assert not run.failed, run.failures()
    report = upgrade_report(run)
    assert report["installed"] == {"crds": NEW, "operator": NEW, "slurm": NEW}
    assert report["same_version"] and not report["changes"]
    assert run.changed == 0, f"changed: {run.changed_tasks()}"
