# SPDX-License-Identifier: GPL-3.0-or-later
"""The older Slinky line, and a real upgrade from it to the lab's release, in the lab.

A fresh lab gets site.yml on the proxy's release (1.1.0) with Slurm 25.11 and accounting:
slurmdbd pods store into the lab's MariaDB as into a site's external database, the users'
jobs need their associations (made by the slurm_accounting component), and jobs are
recorded in slurmdbd, also those that ran while it did not answer. A lend and a reclaim
prove that line still works. Then, with a Slurm job running on a dedicated node and another
on a lent node, upgrade.yml moves the running cluster to the lab's release (1.2.1, built
from the public sources beside the checkout) and Slurm 26.05, slurmdbd first: the jobs are
not lost, the lent node stays lent with its journal, slurm.conf holds what the collection
restates on 1.2, the job history from before the upgrade is still in slurmdbd with the jobs
run across it, and a second run changes nothing. The module runs last among the Kubernetes
tests (tests/integration/conftest.py), so that on a cold machine the older operator builds
while the others run; it starts from a fresh lab whatever the modules before it left.
Without the sources (the lab builds 1.1.0 only) the older line's tests and the preflight
to 1.2.2 still run; the upgrade is skipped.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import LAB_INVENTORY, SITE, UPGRADE, PlaybookRun, run_playbook
from handover_pool import LENDABLE, Pool, keyed_pool
from k8s_binaries import LAB_SLINKY_VERSION, PROXY_SLINKY_VERSION, slinky_operator
from k8s_fixtures import wait_for_batch_nodes
from slurm_pods import (
    DATABASE_NAME,
    DATABASE_PORT,
    DATABASE_USER,
    SLINKY_RELEASE,
    SlinkyCluster,
    SlinkyRest,
    running_pod,
)
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


# The site keeps the books: slurmdbd on the lab's MariaDB (outside the cluster, as a site's
# external database), and the users whose jobs the tests submit in an account.
DATABASE_SECRET = "slurm-database"
ACCOUNTING = {
    "slinky_components": [
        "cert_manager",
        "slurm_operator",
        "slurm_cluster",
        "slurm_accounting",
        "keda",
    ],
    "slurm_cluster_accounting": True,
    "slurm_cluster_accounting_database": {
        "host": SLINKY_RELEASE.address(1),
        "port": DATABASE_PORT,
        "database": DATABASE_NAME,
        "user": DATABASE_USER,
        "password_secret": {"name": DATABASE_SECRET, "key": "password"},
    },
    # No wait at slurmctld's start: the lab's pods have no init containers to run.
    "slurm_cluster_accounting_wait_s": 0,
    # mcs/account: jobs of two accounts never share a node.
    "slurm_cluster_mcs": "account:enforced,select",
    "slurm_accounting_accounts": [
        {"name": "physics", "description": "the upgrade's jobs"},
        {"name": "chemistry", "description": "jobs that keep to their own nodes"},
    ],
    "slurm_accounting_users": [
        {"name": "alice", "accounts": ["physics"]},
        {"name": "bob", "accounts": ["chemistry"]},
    ],
}


# The older line's site runs Slurm 25.11 (that line's own), so the upgrade also moves Slurm to
# the inventory's 26.05, slurmdbd first. The lab's daemons are 26.05 whatever the images' tags
# say: the order is seen in the pods the operator replaces, not in Slurm's versions.
OLD_SLURM = "25.11"


def deploy(version: str) -> PlaybookRun:
    return run_playbook(
        SITE,
        LAB_INVENTORY,
        extra_vars={
            "slinky_version": version,
            **ACCOUNTING,
            "slurm_cluster_slurm_version": OLD_SLURM,
        },
    )


def database_secret(lab: t.Any) -> None:
    """The lab's MariaDB, and the Secret with its password that a site makes for slurmdbd."""
    database = SlinkyCluster(lab).database()
    lab.apply(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "slurm"}},
    )
    lab.apply(
        "/api/v1/namespaces/slurm/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": DATABASE_SECRET},
            "stringData": {"password": database.password},
        },
    )


def accounted_jobs(rest: SlinkyRest) -> dict[int, set[str]]:
    """Each job slurmdbd has a record of, and the states of its records (a requeued job
    has one per run, as `sacct --duplicates` lists them)."""
    status, body = rest.request("GET", f"/slurmdb/{rest.api}/jobs")
    assert status == 200 and isinstance(body, dict), body
    jobs: dict[int, set[str]] = {}
    for job in body["jobs"]:
        jobs.setdefault(int(job["job_id"]), set()).update(job["state"]["current"])
    return jobs


def upgrade(
    version: str,
    *,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    **settings: t.Any,
) -> PlaybookRun:
    """upgrade.yml; the lab's database counts as dumped (the site's part, outside the cluster)
    unless settings say otherwise."""
    return run_playbook(
        UPGRADE,
        LAB_INVENTORY,
        extra_vars={
            "slinky_version": version,
            **ACCOUNTING,
            "slinky_upgrade_database_backed_up": True,
            **settings,
        },
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
    database_secret(k8s_lab)
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


def accounted_job(pool: Pool) -> int:
    """A job run to its end and recorded as completed in slurmdbd; its id."""
    job = pool.submit(None, 1, partition="batch")
    wait_until(
        lambda: "COMPLETED" in accounted_jobs(pool.slurm).get(job, set()),
        60,
        f"slurmdbd to record job {job} as completed",
        lambda: accounted_jobs(pool.slurm),
    )
    return job


@contextlib.contextmanager
def slurmdbd_unreachable(lab: t.Any) -> Iterator[None]:
    """slurmdbd gone for its clients: its pod's network namespace resets every connection to
    its port (as a node that went away would refuse them), its process left as it is, so the
    pod runner does not start another."""
    pod = running_pod(lab.run_dir, "slurm/slurm-accounting-0")
    assert pod.netns, pod
    rule = ["INPUT", "-p", "tcp", "--dport", "6819", "-j", "REJECT", "--reject-with", "tcp-reset"]
    netns = ["ip", "netns", "exec", pod.netns, "iptables"]
    subprocess.run([*netns, "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run([*netns, "-D", *rule], check=True)


def test_a_handover_stops_before_any_change_and_no_job_is_lost_while_slurmdbd_is_gone(
    old_pool: Pool,
) -> None:
    """slurmdbd unreachable: slurmrestd answers no read that needs TRES or QoS names, so a
    lend stops at its check, naming slurmdbd, with nothing changed; a job runs to its end
    meanwhile, slurmdbd records it once it is back (slurmctld keeps what it owes slurmdbd),
    and the lend then goes through."""
    pool = old_pool
    with slurmdbd_unreachable(pool.lab):
        job = pool.submit(None, 5, partition="batch")
        status, body = pool.slurm.request("GET", f"/slurm/{pool.slurm.api}/partitions")
        print(f"GET partitions while slurmdbd is gone: HTTP {status}: {body}")
        run = pool.playbook("lend", handover_nodes=["int01"])
        assert run.failed
        failures = "\n".join(run.failures())
        assert "because slurmdbd does not answer it" in failures, failures
        assert "start them (the slurmdbd pod, app.kubernetes.io/name=slurmdbd" in failures
        pool.assert_clean("int01")
        wait_until(
            lambda: "COMPLETED" in pool.job(job)["job_state"],
            60,
            f"job {job} to complete while slurmdbd is gone",
            lambda: pool.job(job)["job_state"],
        )
    wait_until(
        lambda: "COMPLETED" in accounted_jobs(pool.slurm).get(job, set()),
        120,
        f"slurmdbd to record job {job}, which ran while it was gone",
        lambda: accounted_jobs(pool.slurm),
    )
    run = pool.playbook("lend", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    run = pool.playbook("reclaim", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    pool.assert_clean("int01")


def test_jobs_of_two_accounts_never_share_a_lent_node(old_pool: Pool) -> None:
    """mcs/account: alice's two jobs (physics) share the lent node; bob's (chemistry) waits
    until they are gone, then runs there."""
    pool = old_pool
    run = pool.playbook("lend", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    small = {"required_nodes": ["int01"], "cpus_per_task": 1}
    small["memory_per_node"] = {"set": True, "number": 50}
    alices = [pool.queue(**small), pool.queue(**small)]
    try:
        wait_until(
            lambda: all(pool.job(job)["job_state"] == ["RUNNING"] for job in alices),
            30,
            "alice's two jobs to share int01",
            lambda: [pool.job(job)["job_state"] for job in alices],
        )
        bobs = pool.queue(user="bob", **small)
        # Looked at by the scheduler (a reason given) and still waiting beside alice's.
        wait_until(
            lambda: pool.job(bobs)["state_reason"] not in ("None", ""),
            30,
            "the scheduler to look at bob's job",
        )
        assert pool.job(bobs)["job_state"] == ["PENDING"], pool.job(bobs)
        assert pool.job(bobs)["mcs_label"] == "chemistry", pool.job(bobs)
        for job in alices:
            pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job}")
        wait_until(
            lambda: pool.job(bobs)["job_state"] == ["RUNNING"],
            60,
            "bob's job to run on int01 once alice's are gone",
            lambda: {k: pool.job(bobs)[k] for k in ("job_state", "state_reason")},
        )
        assert pool.job(bobs)["nodes"] == "int01"
        pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{bobs}")
    finally:
        for job in alices:
            pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job}")
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
    # Slurm's order: the lab's images name Slurm 25.11 on 1.1 and 26.05 on 1.2.
    assert report["slurm_release"] == {"installed": "25.11", "wanted": "26.05"}
    assert [stage["upgrades"] for stage in report["slurm_stages"]] == [
        ["slurmdbd"],
        ["slurmctld", "slurmrestd"],
    ]
    assert "Slurm 25.11 -> 26.05 with accounting, in Slurm's order: slurmdbd, then " in changes
    # A database outside the collection's reach must be dumped first: refused until the site
    # says it is.
    run = upgrade(NEW, check=True, tags="preflight", slinky_upgrade_database_backed_up=False)
    assert run.failed
    failures = "\n".join(run.failures())
    assert (
        "dump it first (mariadb-dump --single-transaction <database>) and run again with "
        "-e slinky_upgrade_database_backed_up=true" in failures
    ), failures
    after = old_pool.lab.get("/api/v1/secrets?labelSelector=owner%3Dhelm")["items"]
    assert [s["metadata"]["resourceVersion"] for s in after] == [
        s["metadata"]["resourceVersion"] for s in before
    ]


def submitted(value: t.Any) -> int:
    """slurmdbd's submission time: a number, or {set, infinite, number} on some data_parsers."""
    return int(value["number"] if isinstance(value, dict) else value)


def job_states(pool: Pool, job_id: int) -> tuple[list[str], int]:
    """A job's states and how often it was requeued: from slurmctld while it holds the job,
    else from slurmdbd, which keeps every run (slurmctld forgets an ended job MinJobAge, 300 s,
    after its end, and an upgrade may take longer than that)."""
    rest = pool.slurm
    status, body = rest.request("GET", f"/slurm/{rest.api}/job/{job_id}")
    if status == 200 and isinstance(body, dict) and body.get("jobs"):
        job = body["jobs"][0]
        return job["job_state"], int(job.get("restart_cnt") or 0)
    status, body = rest.request(
        "GET", f"/slurmdb/{rest.api}/jobs?show_duplicates=true&skip_steps=true"
    )
    assert status == 200 and isinstance(body, dict), body
    runs = sorted(
        (run for run in body["jobs"] if int(run["job_id"]) == job_id),
        key=lambda run: submitted(run["time"]["submission"]),
    )
    assert runs, f"job {job_id} is neither in slurmctld nor in slurmdbd"
    # Each requeue ends a run of its own as REQUEUED and the job goes on in a new one.
    return list(runs[-1]["state"]["current"]), len(runs) - 1


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


def went_in_slurms_order(pool: Pool, run: PlaybookRun) -> None:
    """slurmdbd on its new image first, then slurmctld and slurmrestd, each stage waited
    for, then the Slurm cluster's own run for slurmd."""
    stages = run.task_results("hpcops.slinky.slurm_cluster : Say how the stage went")
    said = [stage["msg"] for stage in stages]
    print("\n".join(said))
    assert len(said) == 2, said
    assert said[0].startswith("slurmdbd: on the new images ") and "conversion: " in said[0]
    assert said[1].startswith("slurmctld and slurmrestd: on the new images ")
    pods = pool.lab.get("/api/v1/namespaces/slurm/pods")["items"]
    created = {p["metadata"]["name"]: p["metadata"]["creationTimestamp"] for p in pods}
    assert created["slurm-accounting-0"] <= created["slurm-controller-0"], created


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
    # The books before: a job that ran to its end on the older line, in slurmdbd.
    history_job = accounted_job(pool)
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

    went_in_slurms_order(pool, run)

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

    # The books kept: the job from before the upgrade, and those run across it, in slurmdbd.
    wait_until(
        lambda: all(
            "COMPLETED" in accounted_jobs(pool.slurm).get(job_id, set())
            for job_id in (history_job, *seen)
        ),
        60,
        "slurmdbd to hold every job as completed",
        lambda: accounted_jobs(pool.slurm),
    )

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
