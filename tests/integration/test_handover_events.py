# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Handover runs on events (handover_schedule's event kind) against the lab.

The role makes the rulebook's Deployment, its arguments and the account's watch rights on
the real apiserver, which answers a SubjectAccessReview per rule. kwok runs no container,
so what the Deployment's pod runs is run here: the real ansible-rulebook with the rulebook
``hpcops.slinky.handover``, the inventory and arguments the role wrote, and nothing but the
ServiceAccount's token. With it running and nobody starting a playbook, idle pool nodes are
lent, a notebook that waits for a node runs on a reclaimed one, fifty notebooks make a few
runs, and the source rides out a restart of kube-apiserver. A watch from a resourceVersion
the apiserver no longer has gets its real 410 and lists again. With the policy's
``lend_when: demand`` the source reads the real slurmctld's queue (through slurmrestd, with
the Token's Secret the role names), and a job submitted to backfill runs on the one node
its event lends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import typing as t
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from ansible_runner import COLLECTIONS
from handover_pool import APPS, LENDABLE, POLICY, Pool
from kubernetes import client as k8s_client
from test_handover_schedule import (
    NAME,
    NS,
    SCHEDULE,
    STATUS,
    TOKEN_SECRET,
    account_kubeconfig,
    account_may,
    management_host_applied,
    run_as_service_user,
    schedule_applied,
    service_command,
    slurm_token,
)
from toolbox import LabError, wait_until

from ansible_collections.hpcops.slinky.plugins.plugin_utils._handover.watches import (
    KindWatch,
    UpdateKind,
    WatchTarget,
    WatchUpdate,
    api_client,
)

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration

BIN = Path(os.environ.get("VIRTUAL_ENV") or Path(__file__).parents[2] / ".venv") / "bin"
# A reclaimed node is not lent again during a test (the lab's POLICY re-lends at once).
EVENT_POLICY = {**POLICY, "relend_cooldown_s": 3600}
EVENTS = {
    **SCHEDULE,
    "handover_schedule_kind": "event",
    "handover_schedule_event_debounce_s": 1,
    "handover_schedule_event_repeat_s": 10,
    "handover_policy": EVENT_POLICY,
}
POOL_SELECTOR = {"hpcops.io/pool": "interactive"}
LEASE = "hpcops-slinky-handover"
# lend_when demand: the source reads Slurm's queue every 2 s (the role's least).
DEMAND_EVENTS = {
    **EVENTS,
    "handover_policy": {**EVENT_POLICY, "lend_when": "demand"},
    "handover_schedule_event_slurm_poll_s": 2,
}


@pytest.fixture(scope="module")
def evented(pool: Pool) -> Iterator[Pool]:
    """The role applied with the event kind."""
    yield from schedule_applied(
        pool,
        EVENTS,
        f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-events",
        f"/api/v1/namespaces/{NS}/configmaps/{NAME}-events",
        f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}",
    )


def test_the_role_makes_the_rulebooks_deployment_beside_the_cronjob(evented: Pool) -> None:
    lab = evented.lab
    deployment = lab.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-events")["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"
    pod = deployment["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    assert container["command"] == [
        "ansible-rulebook",
        "--rulebook=hpcops.slinky.handover",
        "--inventory=/etc/hpcops-slinky/inventory.yml",
        "--vars=/etc/hpcops-slinky-events/events.yml",
        "--verbose",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    events = yaml.safe_load(
        lab.get(f"/api/v1/namespaces/{NS}/configmaps/{NAME}-events")["data"]["events.yml"]
    )["handover_events"]
    assert events["policy"]["pool_selector"] == POOL_SELECTOR
    assert events["policy"]["relend_cooldown_s"] == 3600
    assert (events["lease_namespace"], events["lease_name"]) == (NS, "hpcops-slinky-handover")
    assert (events["debounce_s"], events["repeat_s"]) == (1.0, 10.0)
    assert events["kubeconfig"] == ""  # in the pod: its service account
    # The safety net stays, and its runs say they are the timer's.
    cron = lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")["spec"]
    command = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--extra-vars=handover_trigger=timer" in command


def test_applying_the_event_kind_again_changes_nothing(evented: Pool) -> None:
    run = evented.playbook("schedule", **EVENTS)
    assert not run.failed, run.failures()
    assert run.changed_tasks() == [], run.changed_tasks()


# verb, resource, namespace, name, allowed: the watches the source adds to the runs' rights.
WATCH_ACCESS = [
    ("watch", "nodes", "", "", True),
    ("watch", "pods", "", "", True),
    ("list", "leases", NS, "hpcops-slinky-handover", True),
    ("watch", "leases", NS, "hpcops-slinky-handover", True),
    ("watch", "leases", NS, "", False),
    ("list", "leases", NS, "", False),
    ("watch", "leases", "kube-node-lease", "int01", False),
    ("watch", "secrets", NS, "", False),
    # lend_when demand: the Token's Secret, which the runs read too; no other.
    ("get", "secrets", NS, TOKEN_SECRET, True),
    ("get", "secrets", NS, "slurm-jwt-key", False),
    ("watch", "configmaps", NS, "", False),
    ("watch", "events", NS, "", False),
]


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "name", "allowed"),
    WATCH_ACCESS,
    ids=[
        f"{'allow' if a[4] else 'deny'}-{a[0]}-{a[1]}-{a[2] or 'all'}-{a[3] or 'any'}"
        for a in WATCH_ACCESS
    ],
)
def test_rbac_lets_the_source_watch_what_it_reads_and_nothing_else(
    evented: Pool, verb: str, resource: str, namespace: str, name: str, allowed: bool
) -> None:
    group = "coordination.k8s.io" if resource == "leases" else ""
    assert account_may(evented.lab, verb, group, resource, namespace, name) is allowed


class Rulebook:
    """ansible-rulebook run by `argv` with `env`, its output kept in `log_path`."""

    def __init__(
        self, pool: Pool, argv: list[str], env: dict[str, str], cwd: Path, log_path: Path
    ) -> None:
        self.pool = pool
        self.log_path = log_path
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        try:
            wait_until(lambda: "watching Pods" in self.alive_log(), 60, "the event source to watch")
        except (LabError, AssertionError):  # it did not start, or it exited
            self.stop()
            raise AssertionError(f"the rulebook did not start:\n{self.log()[-4000:]}") from None

    @classmethod
    def as_the_deployment(cls, pool: Pool, workdir: Path) -> Rulebook:
        """As the Deployment's pod runs it (kwok runs no container): its container's command
        and environment, its volumes at their mount paths' place under workdir (the
        ConfigMaps' files in theirs), the ServiceAccount's token, nothing else. What the
        image brings (ansible-rulebook, the collection) is this machine's."""
        lab = pool.lab
        deployment = lab.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-events")
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts: dict[str, Path] = {}
        for mount in container["volumeMounts"]:
            target = workdir / mount["name"]
            target.mkdir()
            config_map = volumes[mount["name"]].get("configMap")
            if config_map:
                data = lab.get(f"/api/v1/namespaces/{NS}/configmaps/{config_map['name']}")["data"]
                for key, text in data.items():
                    (target / key).write_text(text)
            mounts[mount["mountPath"]] = target

        def placed(value: str) -> str:
            """value (a path, or --flag=path) with its mount path replaced by its target."""
            flag, equals, path = (
                value.rpartition("=") if value.startswith("--") else ("", "", value)
            )
            # Longest first: /etc/hpcops-slinky is a prefix of /etc/hpcops-slinky-events.
            for mount_path in sorted(mounts, key=len, reverse=True):
                if path == mount_path or path.startswith(f"{mount_path}/"):
                    return f"{flag}{equals}{mounts[mount_path]}{path[len(mount_path) :]}"
            return value

        tmp = placed("/tmp")
        env = {
            **{item["name"]: placed(item["value"]) for item in container.get("env", [])},
            "PATH": f"{BIN}:/usr/bin:/bin",
            "KUBECONFIG": str(account_kubeconfig(lab, workdir / "kubeconfig")),
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "TMPDIR": tmp,
        }
        argv = [placed(arg) for arg in container["command"] + container.get("args", [])]
        argv[0] = str(BIN / argv[0])
        return cls(pool, argv, env, Path(tmp), workdir / "rulebook.log")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive_log(self) -> str:
        assert self.process.poll() is None, f"ansible-rulebook exited:\n{self.log()[-4000:]}"
        return self.log()

    def running_playbook(self) -> bool:
        """Whether a run is under way: an ansible-playbook among the rulebook's descendants
        (ansible-runner starts it in a session of its own, so not in the rulebook's group)."""
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended while we looked
            parents[int(stat.parent.name)] = int(fields[1])
        family = {self.process.pid}
        grown = True
        while grown:
            children = {pid for pid, parent in parents.items() if parent in family}
            grown = not children <= family
            family |= children
        for pid in family - {self.process.pid}:
            try:
                if b"ansible-playbook" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    def stop(self) -> int:
        """SIGTERM, as the kubelet and systemd stop it; its exit code."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(30)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def stop_between_runs(self) -> None:
        """Stop once no run is under way. A run the stop cuts keeps the Lease until it
        expires (as in a cluster); the tests that follow must not wait for that, so a Lease
        left held is removed."""
        if self.process.poll() is None:
            wait_until(lambda: not self.running_playbook(), 180, "the rulebook's run to end")
        self.stop()
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}"
        status, body = self.pool.lab.request("GET", lease)
        if status == 200 and (body.get("spec") or {}).get("holderIdentity"):
            self.pool.lab.request("DELETE", lease)


def stopped_on_sigterm(code: int, log: str) -> bool:
    """The exit status of a rulebook stopped by SIGTERM. Or an abort as it exits, once its
    last run has ended: ansible-rulebook 1.3.2 (its JVM) once aborted in glibc's free() there,
    the last line of its log `free(): invalid pointer` (the CI-like run of 2026-11-29), a crash
    in its teardown rather than in its work."""
    if code in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
        return True
    return code == -signal.SIGABRT and log.rstrip().endswith("free(): invalid pointer")


@pytest.fixture
def rulebook(evented: Pool, clean_pool: Pool, secret_dir: Path) -> Iterator[Rulebook]:
    """The rulebook running for one test, on a clean pool; stopped before the pool is
    cleaned again (so it does not lend what the cleaning reclaims)."""
    slurm_token(evented.lab)
    running = Rulebook.as_the_deployment(clean_pool, secret_dir)  # its token goes after
    yield running
    running.stop_between_runs()


def run_summaries(pool: Pool, since: float) -> list[str]:
    """The one-line summaries of the runs that ended since `since`, oldest first, from
    their Events on the status ConfigMap (each run writes one; the ConfigMap keeps only the
    newest summary)."""
    events = pool.lab.get(
        f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{STATUS}"
    )["items"]
    ended = sorted(
        (datetime.fromisoformat(event["lastTimestamp"]).timestamp(), event["message"])
        for event in events
        if event.get("lastTimestamp")
    )
    # Event times have whole seconds.
    return [message for when, message in ended if when >= int(since)]


def run_summary(pool: Pool, since: float, by: str) -> dict[str, t.Any]:
    """The summary of the newest run started since `since` by a `by` event, once it is
    written (a run reports after it has released the Lease, so after its nodes moved)."""

    def written() -> dict[str, t.Any] | None:
        status, body = pool.lab.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{STATUS}")
        if status != 200:
            return None
        summary: dict[str, t.Any] = json.loads(body["data"]["summary.json"])
        fresh = summary["started"] >= since and summary["trigger"]["by"] == by
        return summary if fresh else None

    return wait_until(written, 60, f"the summary of a run on {by} events")


def wait_all_lent(pool: Pool, rulebook: Rulebook, timeout_s: float = 120) -> None:
    """Until the idle events have lent every pool node and their run has ended."""
    wait_until(
        lambda: (
            rulebook.alive_log()
            and all(pool.journal(n)["state"] == "lent" for n in LENDABLE)
            and not rulebook.running_playbook()
        ),
        timeout_s,
        "the idle pool nodes to be lent on idle events",
    )


def notebook(pool: Pool, name: str, cpu: str = "1", memory: str = "1Gi") -> None:
    """An application pod for the interactive pool, with small requests."""
    pool.app_pod(name, POOL_SELECTOR, cpu=cpu, memory=memory)


def test_idle_nodes_are_lent_and_a_waiting_notebook_runs_on_a_reclaimed_one(
    rulebook: Rulebook,
) -> None:
    pool = rulebook.pool
    started = time.time()
    wait_all_lent(pool, rulebook)
    lent = run_summary(pool, started, "idle")
    assert lent["lent"] and set(lent["lent"]) <= set(LENDABLE), lent
    for node in LENDABLE:
        pool.idle_slurm_node(node)

    created = time.time()
    notebook(pool, "waiting")
    wait_until(
        lambda: rulebook.alive_log() and pool.running_on("waiting"), 90, "the notebook to run"
    )
    waited = time.time() - created
    node = pool.running_on("waiting")
    assert node in LENDABLE and pool.journal(node)["state"] == "free"
    summary = run_summary(pool, created, "demand")
    assert summary["trigger"]["pods"] == [f"{APPS}/waiting"]
    assert summary["returned"] == [node]
    recorded = wait_until(lambda: run_summaries(pool, created), 30, "the run's Event")
    assert "; on demand: 1 unschedulable application pod(s): jupyterhub/waiting" in recorded[-1]
    # The other node stays lent: a demand of one notebook reclaims one node.
    (other,) = set(LENDABLE) - {node}
    assert pool.journal(other)["state"] == "lent"
    print(
        f"lent by idle events in {created - started:.1f} s; the notebook ran after {waited:.1f} s"
    )


def test_fifty_notebooks_at_once_make_a_few_runs_not_fifty(rulebook: Rulebook) -> None:
    pool = rulebook.pool
    wait_all_lent(pool, rulebook)
    created = time.time()
    names = [f"burst-{i:02d}" for i in range(50)]
    threads = [
        threading.Thread(
            target=notebook, args=(pool, name), kwargs={"cpu": "10m", "memory": "16Mi"}
        )
        for name in names
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(
        lambda: rulebook.alive_log() and all(pool.running_on(name) for name in names),
        120,
        "the fifty notebooks to run",
    )
    wait_until(lambda: not rulebook.running_playbook(), 120, "the last run to end")
    every_run = run_summaries(pool, created)
    runs = [line for line in every_run if "; on demand: " in line]
    # A few: the first event, the one gathering the rest within the debounce, and repeats
    # (every repeat_s) while the scheduler still has pods of the burst Pending; on a machine
    # running the kind scenarios beside this lab, a cold `make test` saw four.
    assert 1 <= len(runs) <= 4, every_run
    # The first pod is announced at once, and that run's plan counted every pod pending when
    # it read the pool: its reclaim made room for the burst (a later event gathers what
    # followed it within the debounce, if anything still waits): one node given back in all.
    # That run may be an idle event's the rulebook had queued behind the lending run: it
    # plans the pool as any run does. (Event times have whole seconds: the lending run may
    # be listed too.)
    returned = [line for line in every_run if " returned" in line]
    assert len(returned) == 1 and "1 returned" in returned[0], every_run


def test_the_source_rides_out_a_restart_of_the_apiserver(rulebook: Rulebook) -> None:
    pool = rulebook.pool
    wait_all_lent(pool, rulebook)
    pool.lab.restart("kube-apiserver")
    notebook(pool, "after-restart")
    wait_until(
        lambda: rulebook.alive_log() and pool.running_on("after-restart"),
        120,
        "the notebook created after the restart to run",
    )
    log = rulebook.log()
    assert "watch: " in log, log[-3000:]  # the watches saw the connection go, and came back


def test_a_watch_the_apiserver_no_longer_has_lists_again_and_stops_at_once(pool: Pool) -> None:
    """resourceVersion 1 is long gone from the watch cache: the real 410, then a list."""
    api = api_client(str(pool.lab.kubeconfig_path))
    core = k8s_client.CoreV1Api(api)
    updates: list[WatchUpdate] = []
    watch = KindWatch(
        WatchTarget("Pod", core.list_namespaced_pod, {"namespace": APPS}), updates.append
    )
    watch.resource_version = "1"  # as if resuming from a version older than the cache
    watch.start()
    try:
        wait_until(lambda: updates, 30, "the watch to report")
        assert updates[0].update == UpdateKind.LISTED, updates
        assert int(watch.resource_version) > 1
        notebook(pool, "watched")
        wait_until(
            lambda: any(
                u.update == UpdateKind.CHANGED
                and u.event_type == "ADDED"
                and u.objects[0]["metadata"]["name"] == "watched"
                for u in updates
            ),
            30,
            "the new pod's ADDED event",
        )
    finally:
        began = time.time()
        watch.stop()
        watch.join(5)
        stopped_in = time.time() - began
        pool.lab.request("DELETE", f"/api/v1/namespaces/{APPS}/pods/watched?gracePeriodSeconds=0")
        api.close()
    assert not watch.is_alive() and stopped_in < 2, stopped_in


@pytest.fixture
def demand_rulebook(evented: Pool, clean_pool: Pool, secret_dir: Path) -> Iterator[Rulebook]:
    """The role applied again with lend_when demand, and its rulebook running; afterwards
    stopped, and the role as the other tests have it."""
    run = evented.playbook("schedule", **DEMAND_EVENTS)
    assert not run.failed, run.failures()
    try:
        slurm_token(evented.lab)
        running = Rulebook.as_the_deployment(clean_pool, secret_dir)  # its token goes after
        try:
            yield running
        finally:
            running.stop_between_runs()
    finally:
        run = evented.playbook("schedule", **EVENTS)
        assert not run.failed, run.failures()


def test_the_role_gives_the_source_slurms_url_and_the_tokens_secret_with_lend_when_demand(
    demand_rulebook: Rulebook,
) -> None:
    lab = demand_rulebook.pool.lab
    events = yaml.safe_load(
        lab.get(f"/api/v1/namespaces/{NS}/configmaps/{NAME}-events")["data"]["events.yml"]
    )["handover_events"]
    assert events["policy"]["lend_when"] == "demand"
    assert events["slurm"] == {
        "url": "http://127.0.0.1:6820",  # the lab inventory's handover_slurmrestd_url
        "token_secret": {"namespace": NS, "name": TOKEN_SECRET, "key": "auth-token"},
        "user": "slurm",
        "poll_s": 2.0,
    }
    assert "polling Slurm's queue of partition(s) backfill at http://127.0.0.1:6820 every 2 s" in (
        demand_rulebook.alive_log()
    )
    # With its poll of Slurm as well, SIGTERM stops it promptly, between runs.
    wait_until(
        lambda: (
            all("idle_since" in demand_rulebook.pool.journal(name) for name in LENDABLE)
            and not demand_rulebook.running_playbook()
        ),
        120,
        "the idle event's run to end",
    )
    began = time.time()
    code = demand_rulebook.stop()
    assert time.time() - began < 15
    log = demand_rulebook.log()
    assert stopped_on_sigterm(code, log), (code, log[-2000:])
    assert "Traceback" not in log and "Slurm's queue: " not in log, log[-4000:]


def test_a_job_an_idle_node_would_start_runs_within_seconds_on_the_one_node_lent_for_it(
    demand_rulebook: Rulebook,
) -> None:
    """Nobody starts a playbook: the source reads the queue, announces slurm_demand, the
    rulebook's rebalance lends one node, and the job runs there."""
    pool = demand_rulebook.pool
    token = slurm_token(pool.lab)
    # The first run records the idle nodes' idle_since (an idle event) and lends nothing:
    # nothing waits in Slurm.
    wait_until(
        lambda: (
            demand_rulebook.alive_log()
            and all("idle_since" in pool.journal(name) for name in LENDABLE)
            and not demand_rulebook.running_playbook()
        ),
        120,
        "the idle event's run to record idle_since",
    )
    assert all(pool.journal(name)["state"] == "free" for name in LENDABLE)

    submitted = time.time()
    job_id = backfill_job(pool)
    seen: dict[str, t.Any] = {}

    def running_and_reported() -> bool:
        """Whether the job runs (when first seen so) and the summary of the run that lent
        for it has been read: read at once, as a repeat's run would overwrite it."""
        demand_rulebook.alive_log()
        if "ran" not in seen and "RUNNING" in pool.job(job_id)["job_state"]:
            seen["ran"] = time.time()
        if "summary" not in seen:
            status, body = pool.lab.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{STATUS}")
            if status == 200:
                summary = json.loads(body["data"]["summary.json"])
                if summary["started"] >= submitted and summary["trigger"]["by"] == "slurm_demand":
                    seen["summary"] = summary
        return "ran" in seen and "summary" in seen

    try:
        wait_until(running_and_reported, 120, f"job {job_id} to run on a node lent for it")
        waited = seen["ran"] - submitted
        node = pool.job(job_id)["nodes"]
        assert node in LENDABLE, node
        summary = seen["summary"]
        assert summary["lent"] == [node], summary
        assert summary["trigger"]["jobs"] == [job_id]
        assert summary["trigger"]["nodes"] == [node]
        # The event is repeated every repeat_s while the source's last read shows the job
        # pending and a node free: a run it starts before the job runs places the job on the
        # node lent for it and lends nothing more.
        wait_until(
            lambda: time.time() > seen["ran"] + 13 and not demand_rulebook.running_playbook(),
            60,
            "the runs of this job's events to end",
        )
        runs = [
            line.split(" (pool: ")[0]
            for line in run_summaries(pool, submitted)
            if "; on slurm_demand: " in line
        ]
        assert runs and "1 lent in" in runs[0], runs
        assert not any(" lent in" in run for run in runs[1:]), runs
        (other,) = set(LENDABLE) - {node}
        assert pool.journal(node)["state"] == "lent"
        assert pool.journal(other)["state"] == "free"  # one job, one node
        log = demand_rulebook.log()
        assert (
            f"announcing slurm_demand: 1 job(s) waiting in Slurm that 1 idle pool node(s) "
            f"would start: {job_id}"
        ) in log, log[-3000:]
        assert token not in log
        print(
            f"job {job_id} submitted to backfill announced after "
            f"{announced_at(log, 'slurm_demand') - submitted:.1f} s, ran on {node} after "
            f"{waited:.1f} s (its lend took {summary['duration_s']:.1f} s); {len(runs)} run(s) "
            "on its events"
        )
    finally:
        pool.slurm.request("DELETE", f"/slurm/{pool.slurm.api}/job/{job_id}")


def announced_at(log: str, trigger: str) -> float:
    """When the rulebook's log first says the source announced `trigger` (Unix time; the
    log's times are local)."""
    line = next(line for line in log.splitlines() if f" - announcing {trigger}: " in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def backfill_job(pool: Pool) -> int:
    """A job in backfill for one CPU, its time limit (1 min) within the lab's 60 s grace and
    requeue-able, left pending: backfill has no node until one is lent."""
    return pool.queue(name="slurm-demand", time_limit={"set": True, "number": 1}, requeue=True)


def test_the_rulebook_stops_cleanly_on_sigterm(rulebook: Rulebook) -> None:
    rulebook.alive_log()
    began = time.time()
    code = rulebook.stop()
    assert time.time() - began < 15
    assert stopped_on_sigterm(code, rulebook.log()), (code, rulebook.log()[-2000:])
    assert "Traceback" not in rulebook.log(), rulebook.log()[-4000:]


@pytest.fixture
def service_host(evented: Pool) -> Iterator[dict[str, Path]]:
    """The event kind with its rulebook as a systemd service on this machine as a management
    host, beside the timer (neither enabled: systemd is not PID 1 here). Last in the module:
    removing it removes the account the other tests use."""
    yield from management_host_applied(
        evented, {**EVENTS, "handover_schedule_event_runner": "systemd"}
    )


def test_the_rulebook_runs_as_a_systemd_service_beside_the_timer(
    service_host: dict[str, Path], clean_pool: Pool
) -> None:
    """The role puts ansible-rulebook in the runs' virtualenv and writes the service; its
    command, run as its user with nothing but its kubeconfig, lends idle nodes on events."""
    pool = clean_pool
    units = service_host["units"]
    service = units / f"{NAME}-events.service"
    verify = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            str(service),
            *(str(units / f"{NAME}.{kind}") for kind in ("service", "timer")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    assert NAME not in verify.stderr, verify.stderr
    assert "Restart=always\n" in service.read_text()
    arguments = yaml.safe_load((service_host["config"] / f"{NAME}.events.yml").read_text())
    assert arguments["handover_events"]["kubeconfig"] == str(service_host["kubeconfig"])
    # On the host, so not in the cluster as well.
    deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-events"
    assert pool.lab.request("GET", deployment)[0] == 404

    slurm_token(pool.lab)
    argv, env = service_command(service)
    home = Path(env["HOME"])
    started = time.time()
    rulebook = Rulebook(
        pool, run_as_service_user(home) + argv, env, home, units.parent / "rulebook.log"
    )
    try:
        wait_all_lent(pool, rulebook)
        lent = run_summary(pool, started, "idle")
        assert lent["lent"] and set(lent["lent"]) <= set(LENDABLE), lent
    finally:
        rulebook.stop_between_runs()
