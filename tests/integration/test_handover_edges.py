# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover's edges against the lab: outcomes and exit codes a script can trust, every
setting and named node checked before the Lease, a slurmrestd outage and an expiring token
ridden out, orphaned Slurm nodes and application pods on lent nodes reported.

The same real apiserver, scheduler, controller-manager, Slinky operator and Slurm 26.05 as
test_handover.py; the pool and its fixtures are in handover_pool.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import LAB_INVENTORY, run_playbook
from handover_pool import FAULT_EXIT, JOURNAL, MERGE, PLAYBOOKS, POLICY, Pool
from k8s_lab import NODES
from slurm_pods import REST_ADDRESS
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration

NS = "slurm"
LEASE = "hpcops-slinky-handover"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
STATUS_CONFIGMAP = "hpcops-slinky-handover-status"
# ansible-playbook's exit code when a task failed: what every refused or unfinished run gives.
TASK_FAILED = 2


# -- what runs record, and the Lease -----------------------------------------------------


def records(pool: Pool) -> tuple[str, int]:
    """What runs have recorded so far: the status ConfigMap's resourceVersion ("" when
    there is none) and how many run Events it has."""
    status, body = pool.lab.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{STATUS_CONFIGMAP}")
    version = body["metadata"]["resourceVersion"] if status == 200 else ""
    events = pool.lab.get(
        f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{STATUS_CONFIGMAP}"
    )["items"]
    return version, len(events)


def hold_lease(pool: Pool, holder: str = "another-run", seconds: int = 300) -> None:
    """The Lease as a live run elsewhere holds it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    pool.lab.request("DELETE", f"{LEASES}/{LEASE}")
    status, body = pool.lab.request(
        "POST",
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    assert status == 201, body


def lease_exists(pool: Pool) -> bool:
    return pool.lab.request("GET", f"{LEASES}/{LEASE}")[0] == 200


@pytest.fixture
def held_lease(clean_pool: Pool) -> Iterator[Pool]:
    hold_lease(clean_pool)
    yield clean_pool
    clean_pool.lab.request("DELETE", f"{LEASES}/{LEASE}")


def summary_of(path: Path) -> dict[str, t.Any]:
    summary: dict[str, t.Any] = json.loads(path.read_text())
    return summary


# -- a slurmrestd that can go away -------------------------------------------------------


class SwitchableProxy:
    """A TCP proxy on 127.0.0.1 in front of the lab's real slurmrestd. `down()` closes it
    and every connection through it (a client then gets "connection refused", as from a
    slurmrestd that died); `up()` listens again on the same port. `hang()` accepts new
    connections and never answers them (a slurmrestd that is stopped or stuck), until
    `unhang()`."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.hanging = False

    def hang(self) -> None:
        self.hanging = True

    def unhang(self) -> None:
        self.hanging = False

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._open.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _peer = server.accept()
            except OSError:
                return  # closed by down()
            if self.hanging:
                with self._lock:
                    self._open.add(client)  # held open, never read: closed by down()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy() -> Iterator[SwitchableProxy]:
    switch = SwitchableProxy(REST_ADDRESS)
    switch.up()
    yield switch
    switch.down()


# -- exit codes and outcomes -------------------------------------------------------------


def test_a_run_whose_module_dies_gives_the_lease_back_and_records_that_it_failed(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """handover_run's process killed mid-lend (as a crash would): the role gives back the
    Lease it held, records the run as failed, and the next run finishes the node."""
    pool = clean_pool
    before = records(pool)
    summary = tmp_path / "summary.json"
    extra = {
        "handover_policy": POLICY,
        "handover_nodes": ["int01"],
        "handover_summary_path": str(summary),
    }
    crashed = run_playbook(
        PLAYBOOKS / "lend.yml",
        LAB_INVENTORY,
        extra_vars=extra,
        env={"HPCOPS_HANDOVER_FAULT": "lend:taint", "TMPDIR": str(tmp_path)},
    )
    assert crashed.returncode == TASK_FAILED, crashed.output
    assert f'"rc": {FAULT_EXIT}' in crashed.output  # the module's own end, shown
    message = crashed.failures()[-1]
    assert message.startswith("failed: the handover_run module ended without a result (rc 75"), (
        message
    )
    assert not lease_exists(pool)  # given back: the next run need not wait 900 s
    got = summary_of(summary)
    assert (got["outcome"], got["acted"], got["requested"]) == ("failed", True, ["int01"])
    version, events = records(pool)
    assert version != before[0] and events == before[1] + 1
    assert pool.journal("int01")["state"] == "lending"
    run = pool.playbook("lend", handover_nodes=["int01"])
    assert not run.failed, run.failures()
    assert pool.journal("int01")["state"] == "lent"


def test_a_named_run_that_finds_the_lease_held_fails_and_records_nothing(
    held_lease: Pool, tmp_path: Path
) -> None:
    pool = held_lease
    before = records(pool)
    summary = tmp_path / "summary.json"
    for playbook in ("lend", "reclaim"):
        run = pool.playbook(playbook, handover_nodes=["int01"], handover_summary_path=str(summary))
        assert run.returncode == TASK_FAILED, run.output
        message = " ".join(run.failures())
        assert message.startswith("lease_held: another-run holds the handover Lease"), message
        assert "handover_lease_wait_s" in message
        assert run.changed == 0
        got = summary_of(summary)
        assert (got["action"], got["outcome"], got["lease_holder"]) == (
            playbook,
            "lease_held",
            "another-run",
        )
    # A scheduled rebalance that finds it held exits 0: the next one comes soon.
    run = pool.playbook("rebalance", handover_summary_path=str(summary))
    assert not run.failed, run.failures()
    assert run.changed == 0
    assert summary_of(summary)["outcome"] == "lease_held"
    # Nothing recorded: the holder's summary stands; the node was not touched.
    assert records(pool) == before
    assert pool.journal("int01")["state"] == "free"
    assert pool.marks("int01") == (False, False)


def test_a_named_run_may_wait_for_the_lease(held_lease: Pool, tmp_path: Path) -> None:
    pool = held_lease

    def holder_ends() -> None:
        time.sleep(6)
        pool.lab.request("DELETE", f"{LEASES}/{LEASE}")

    threading.Thread(target=holder_ends, daemon=True).start()
    summary = tmp_path / "summary.json"
    run = pool.playbook(
        "lend",
        handover_nodes=["int01"],
        handover_lease_wait_s=90,
        handover_summary_path=str(summary),
    )
    assert not run.failed, run.failures()
    got = summary_of(summary)
    assert (got["outcome"], got["lent"], got["nodes"]) == ("done", ["int01"], {"int01": "lent"})
    assert pool.journal("int01")["state"] == "lent"


def test_a_named_reclaim_that_ends_blocked_fails_with_its_outcome(
    clean_pool: Pool, tmp_path: Path
) -> None:
    pool = clean_pool
    assert not pool.playbook("lend", handover_nodes=["int01"]).failed
    job_id = pool.submit("int01", 600)
    policy = {**POLICY, "partitions": {"backfill": {"grace_s": 2, "escalation": "wait"}}}
    summary = tmp_path / "summary.json"
    run = pool.playbook(
        "reclaim",
        handover_nodes=["int01"],
        handover_policy=policy,
        handover_summary_path=str(summary),
    )
    assert run.returncode == TASK_FAILED
    message = " ".join(run.failures())
    assert message.startswith("blocked: int01: jobs [") and "(asked to reclaim int01)" in message
    got = summary_of(summary)
    assert (got["outcome"], got["blocked"], got["short"]) == (
        "blocked",
        ["int01"],
        {"int01": "blocked"},
    )
    assert pool.job(job_id)["job_state"] == ["RUNNING"]  # the policy holds: nothing killed
    # The same state from a scheduled rebalance is its normal business: exit 0.
    run = pool.playbook(
        "rebalance",
        handover_policy={**policy, "max_changes_per_run": 1},
        handover_summary_path=str(summary),
    )
    assert not run.failed, run.failures()
    assert summary_of(summary)["outcome"] == "blocked"


# -- settings and named nodes, before the Lease ------------------------------------------

# Every refusal of a run is reported at once, so each run below carries several: fewer
# playbook runs (each costs seconds) for the same checks. The settings are checked before the
# named nodes, so empty and repeated names have runs of their own.
NAMED = [
    (
        "lend",
        ["svc01", "gpu01", "int01", "nosuch"],
        [
            "handover_nodes[0]: svc01: not in the lendable pool",
            "handover_nodes[1]: gpu01: matches never_touch_selector",
            "handover_nodes[3]: nosuch: no such Node",
        ],
    ),
    (
        "reclaim",
        ["svc01", "gpu01", "int01", "nosuch"],
        [
            "handover_nodes[0]: svc01: not in the lendable pool",
            "handover_nodes[1]: gpu01: matches never_touch_selector",
            "handover_nodes[3]: nosuch: no such Node",
        ],
    ),
    ("lend", [""], ["handover_nodes[0]: '' is empty"]),
    (
        "reclaim",
        ["", "int01", "int01"],
        ["handover_nodes[0]: '' is empty", "handover_nodes[2]: int01 is named twice"],
    ),
]


@pytest.mark.parametrize(
    ("playbook", "nodes", "messages"), NAMED, ids=[f"{p}-{n}" for p, n, _m in NAMED]
)
def test_named_nodes_a_run_cannot_own_are_refused_before_the_lease(
    pool: Pool, playbook: str, nodes: list[str], messages: list[str]
) -> None:
    # The module-scoped pool, not a cleaned one: a refused run changes nothing to clean.
    assert_refused(pool, playbook, {"handover_nodes": nodes}, messages)


BAD_POLICY = [
    ("headroom", "two", "handover_policy.headroom: 'two' is not a whole number"),
    ("headroom", -1, "handover_policy.headroom: -1 is negative"),
    ("max_lent", -2, "handover_policy.max_lent: -2 is negative"),
    ("max_lent", "many", "handover_policy.max_lent: 'many' is not a whole number"),
    ("max_lent_fraction", 1.5, "handover_policy.max_lent_fraction: 1.5 is not between 0 and 1"),
    ("max_lent_fraction", "most", "handover_policy.max_lent_fraction: 'most' is not a number"),
    ("lend_min_idle_s", -5, "handover_policy.lend_min_idle_s: -5 is negative"),
    (
        "relend_cooldown_s",
        "soon",
        "handover_policy.relend_cooldown_s: 'soon' is not a whole number",
    ),
    ("max_changes_per_run", 0, "handover_policy.max_changes_per_run: 0 is below 1"),
    ("pool_selector", {}, "handover_policy.pool_selector: is empty"),
    (
        "pool_selector",
        "interactive",
        "handover_policy.pool_selector: 'interactive' is not a mapping",
    ),
    (
        "never_touch_selector",
        ["gpu"],
        "handover_policy.never_touch_selector: ['gpu'] is not a mapping",
    ),
    (
        "demand_selector",
        {"app": 5},
        "handover_policy.demand_selector['app']: 5 is a number, not a string",
    ),
    ("demand_namespaces", {"a": 1}, "handover_policy.demand_namespaces: {'a': 1} is not a list"),
    ("system_namespaces", [1], "handover_policy.system_namespaces[0]: 1 is not a string"),
    ("partitions", ["backfill"], "handover_policy.partitions: ['backfill'] is not a mapping"),
    (
        "partitions",
        {"backfill": {"grace_s": -1, "escalation": "requeue"}},
        "handover_policy.partitions.backfill.grace_s: -1 is negative",
    ),
    (
        "partitions",
        {"backfill": {"grace_s": 60, "escalation": "kill"}},
        "handover_policy.partitions.backfill.escalation: 'kill' is not a known escalation",
    ),
    (
        "partitions",
        {"backfill": {"grace": 60}},
        "handover_policy.partitions.backfill.grace: is not a partition setting",
    ),
    (
        "default_escalation",
        "kill",
        "handover_policy.default_escalation: 'kill' is not a known escalation",
    ),
    ("default_grace_s", -1, "handover_policy.default_grace_s: -1 is negative"),
    ("headrom", 2, "handover_policy.headrom: is not a policy setting; did you mean headroom?"),
]


def policy_runs(bad: list[tuple[str, t.Any, str]]) -> list[list[tuple[str, t.Any, str]]]:
    """BAD_POLICY split into runs in which each key appears once."""
    runs: list[list[tuple[str, t.Any, str]]] = []
    for case in bad:
        run = next((r for r in runs if case[0] not in {key for key, _v, _m in r}), None)
        if run is None:
            runs.append(run := [])
        run.append(case)
    return runs


@pytest.mark.parametrize(
    "cases", policy_runs(BAD_POLICY), ids=lambda cases: "+".join(key for key, _v, _m in cases)
)
def test_every_policy_setting_is_checked_before_the_lease(
    pool: Pool, cases: list[tuple[str, t.Any, str]]
) -> None:
    policy = {**POLICY, **{key: value for key, value, _m in cases}}
    assert_refused(pool, "rebalance", {"handover_policy": policy}, [m for _k, _v, m in cases])


@pytest.mark.parametrize("playbook", ["rebalance", "reclaim"])
def test_a_policy_partition_the_cluster_lacks_is_refused_before_the_lease(
    pool: Pool, playbook: str
) -> None:
    """A typo would give that partition's jobs the default grace and escalation unnoticed:
    here `wait` would have become the default `requeue`."""
    policy = {**POLICY, "partitions": {"backfil": {"grace_s": 60, "escalation": "wait"}}}
    extra: dict[str, t.Any] = {"handover_policy": policy}
    if playbook == "reclaim":
        extra["handover_nodes"] = ["int01"]
    assert_refused(
        pool,
        playbook,
        extra,
        [
            "handover_policy.partitions.backfil: is not a Slurm partition of the lendable "
            "NodeSets (interactive, interactive-a100; theirs: backfill); did you mean backfill?",
        ],
    )


def assert_refused(pool: Pool, playbook: str, extra: dict[str, t.Any], messages: list[str]) -> None:
    """Refused before the Lease: exit 2, the message names each variable, nothing changed,
    nothing recorded, no Lease taken, no node touched."""
    before = records(pool)
    run = pool.playbook(playbook, **extra)
    assert run.returncode == TASK_FAILED, run.output
    last = run.failures()[-1]  # the run's own; the check it rescued comes before it
    assert last.startswith("invalid: "), run.failures()
    missing = [message for message in messages if message not in last]
    assert not missing, f"not reported: {missing}; the run said: {last}"
    assert "Traceback" not in run.output
    assert run.changed == 0
    assert records(pool) == before
    assert not lease_exists(pool)
    for name in ("int01", "int02", "svc01", "gpu01"):
        assert pool.marks(name) == (False, False), name
        assert pool.journal(name)["state"] == "free", name


def test_node_handover_refuses_for_reclaim_what_it_refuses_for_lend(clean_pool: Pool) -> None:
    """The module on its own, too: the same refusal for both actions, not a node `free`."""
    for action in ("lend", "reclaim"):
        run = clean_pool.handover(action, ["svc01"])
        assert run.failed
        assert "svc01: refused: not in the lendable pool" in run["msg"], run
        assert run["nodes"][0]["result"] == "refused"
        run = clean_pool.handover(action, ["int01", " "])
        assert run.failed and "nodes[1]: ' ' is empty" in run["msg"], run
        assert run["nodes"] == []  # refused before any node was looked at


# -- outages and tokens ------------------------------------------------------------------


def reclaim_through(pool: Pool, proxy: SwitchableProxy) -> t.Any:
    """Reclaim int01 through the proxy, with 90 s of grace to ride its outages out."""
    return pool.handover(
        "reclaim",
        ["int01"],
        url=f"http://{proxy.address}",
        policy={
            "pool_selector": {"hpcops.io/pool": "interactive"},
            **POLICY,
            "partitions": {"backfill": {"grace_s": 90, "escalation": "requeue"}},
        },
    )


def test_a_reclaim_rides_out_a_slurmrestd_outage_within_its_grace(
    clean_pool: Pool, proxy: SwitchableProxy
) -> None:
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 25)
    outage_s = 20.0  # longer than the client's own retries (about 7 s)

    def outage() -> None:
        time.sleep(3)
        proxy.down()
        time.sleep(outage_s)
        proxy.up()

    threading.Thread(target=outage, daemon=True).start()
    started = time.monotonic()
    run = reclaim_through(pool, proxy)
    assert not run.failed, run
    assert run["nodes"][0]["result"] == "free"
    assert time.monotonic() - started > outage_s
    # It said each time it waited, and the job had its grace: it ran to its end.
    waits = [w for w in run.get("warnings", []) if "cannot reach slurmrestd" in w]
    assert waits and all("before this step's deadline" in w for w in waits), run.get("warnings")
    assert pool.job(job_id)["job_state"] == ["COMPLETED"]
    pool.assert_clean("int01")


def test_a_hung_slurmrestd_is_noted_each_time_like_a_refused_one(
    clean_pool: Pool, proxy: SwitchableProxy
) -> None:
    """Connections accepted and never answered: each request gives up after 10 s with a
    warning and is tried again with backoff, instead of waiting 30 s at a time in silence."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 20)

    def stuck() -> None:
        time.sleep(3)
        proxy.hang()
        time.sleep(15)
        proxy.unhang()

    threading.Thread(target=stuck, daemon=True).start()
    run = reclaim_through(pool, proxy)
    assert not run.failed, run
    assert run["nodes"][0]["result"] == "free"
    waits = [w for w in run["nodes"][0]["warnings"] if "did not answer" in w]
    assert waits, run["nodes"][0]["warnings"]
    # Each request waited 10 s at most (the grace of 90 s leaves that long), once.
    assert all("within 10 s (1 attempt); trying again in" in w for w in waits), waits
    assert pool.job(job_id)["job_state"] == ["COMPLETED"]
    pool.assert_clean("int01")


TOKEN_SECRET = "handover-edges-jwt"
TOKEN_LIFESPAN_S = 12


@pytest.fixture
def renewed_token(clean_pool: Pool) -> Iterator[dict[str, str]]:
    """A Secret with a slurmrestd JWT that lives 12 s, renewed every 8 s as a Slinky Token's
    Secret is (the operator writes a new JWT when four fifths of its lifetime have passed).

    The test renews it itself: Slinky 1.1.0's operator stops renewing a Token this
    short-lived after a few rounds (measured in the lab), and a test must not hang on that.
    """
    path = f"/api/v1/namespaces/{NS}/secrets"
    stop = threading.Event()

    def write() -> None:
        token = clean_pool.slurm.token("slurm", lifespan=TOKEN_LIFESPAN_S)
        data = {"auth-token": base64.b64encode(token.encode()).decode()}
        status, body = clean_pool.lab.request(
            "PATCH", f"{path}/{TOKEN_SECRET}", {"data": data}, content_type=MERGE
        )
        if status == 404:
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TOKEN_SECRET}}
            status, body = clean_pool.lab.request("POST", path, {**secret, "data": data})
        assert status in (200, 201), body

    def renew() -> None:
        while not stop.wait(TOKEN_LIFESPAN_S * 4 / 5 - 1.6):
            write()

    write()
    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    yield {"namespace": NS, "name": TOKEN_SECRET, "key": "auth-token"}
    stop.set()
    renewer.join()
    clean_pool.lab.request("DELETE", f"{path}/{TOKEN_SECRET}")


def test_a_token_from_its_secret_is_read_again_when_it_expires_mid_run(
    clean_pool: Pool, renewed_token: dict[str, str]
) -> None:
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 40)  # the reclaim waits for it, past three token lifetimes
    started = time.monotonic()
    run = pool.playbook(
        "reclaim",
        handover_nodes=["int01"],
        handover_slurm_token_secret=renewed_token,
        handover_slurm_user="slurm",
        handover_policy={
            **POLICY,
            "partitions": {"backfill": {"grace_s": 120, "escalation": "requeue"}},
        },
    )
    assert not run.failed, run.failures()
    assert time.monotonic() - started > 3 * TOKEN_LIFESPAN_S
    assert pool.job(job_id)["job_state"] == ["COMPLETED"]
    pool.assert_clean("int01")


def test_a_static_token_that_expires_before_a_run_may_end_is_warned_about(pool: Pool) -> None:
    token = pool.slurm.token("root", lifespan=60)
    run = pool.playbook("status", handover_slurm_token=token)
    assert not run.failed, run.failures()
    assert "WARNING: handover_slurm_token expires in" in run.output
    assert token not in run.output


def test_the_report_knows_the_pool_when_slurmrestd_goes_away_after_the_lend(
    clean_pool: Pool, proxy: SwitchableProxy, tmp_path: Path
) -> None:
    """slurmrestd goes away after the lend, before the run reports: the report needs no
    second read of the pool (node_handover read the Nodes after its work), so it says where
    every pool node is; a pool it cannot read is "unknown", never "empty" (unit tests)."""
    pool = clean_pool

    def cut_after_the_lease() -> None:
        wait_until(lambda: lease_exists(pool), 120, "the run to take the Lease")
        wait_until(lambda: not lease_exists(pool), 300, "the run to release the Lease")
        proxy.down()

    threading.Thread(target=cut_after_the_lease, daemon=True).start()
    summary = tmp_path / "summary.json"
    run = pool.playbook(
        "lend",
        handover_nodes=["int01"],
        handover_slurmrestd_url=f"http://{proxy.address}",
        handover_summary_path=str(summary),
    )
    assert not run.failed, run.failures()
    got = summary_of(summary)
    assert got["outcome"] == "done" and got["lent"] == ["int01"]
    assert got["pool"]["lent"] == 1 and got["pool_nodes"] == sum(got["pool"].values())
    assert not [w for w in got["warnings"] if "could not be read" in w], got["warnings"]
    configmap = pool.lab.get(f"/api/v1/namespaces/{NS}/configmaps/{STATUS_CONFIGMAP}")
    assert "1 lent" in configmap["data"]["summary"].split("(pool: ", 1)[1]


def test_a_loan_is_recorded_when_lent_and_again_whole_when_given_back(clean_pool: Pool) -> None:
    """The lending report's loans: the lend writes int01's key in the ConfigMap of the
    month it began, with the time the journal says it became lent; the reclaim writes it
    again with when its reclaim began and when it came back."""
    pool = clean_pool
    lent = pool.playbook("lend", handover_nodes=["int01"])
    assert not lent.failed, lent.failures()
    journal = json.loads(pool.lab.get("/api/v1/nodes/int01")["metadata"]["annotations"][JOURNAL])
    assert journal["state"] == "lent" and journal["lent_at"] == journal["since"]
    month = time.strftime("%m", time.gmtime(journal["lent_at"]))
    path = f"/api/v1/namespaces/{NS}/configmaps/{STATUS_CONFIGMAP}-loans-{month}"
    key = f"int01.{int(journal['lent_at'])}"
    record = json.loads(pool.lab.get(path)["data"][key])
    assert record == {
        "node": "int01", "partition": "backfill", "lent": journal["lent_at"],
        "reclaim": None, "returned": None,
    }  # fmt: skip
    back = pool.playbook("reclaim", handover_nodes=["int01"])
    assert not back.failed, back.failures()
    configmap = pool.lab.get(path)
    record = json.loads(configmap["data"][key])
    assert journal["lent_at"] < record["reclaim"] <= record["returned"], record
    assert configmap["metadata"]["labels"]["hpcops.io/loans-month"] == time.strftime(
        "%Y-%m", time.gmtime(journal["lent_at"])
    )
    freed = json.loads(pool.lab.get("/api/v1/nodes/int01")["metadata"]["annotations"][JOURNAL])
    assert "lent_at" not in freed and freed["state"] == "free"


# -- orphans and intruders ---------------------------------------------------------------


def restore_node(pool: Pool, name: str) -> None:
    """The kwok Node again, as the lab made it."""
    manifest = next(node.manifest() for node in NODES if node.name == name)
    pool.lab.apply("/api/v1/nodes", manifest)
    pool.wait_ready(name)


def test_a_deleted_lent_node_leaves_an_orphan_that_is_cleaned_and_its_job_escalated(
    clean_pool: Pool, tmp_path: Path
) -> None:
    """The lent Node goes (a machine retired) and comes back (a new Node: free, no slurmd)
    before its Slurm record was removed. The record, with a job slurmctld still counts as
    running, is an orphan either way: reported, drained, its job requeued once the
    partition's grace has passed (not left to slurmctld's timeouts), its record removed."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    job_id = pool.submit("int01", 600)
    try:
        status, body = pool.lab.request("DELETE", "/api/v1/nodes/int01")
        assert status == 200, body
        # Its pods go with the machine (the pod garbage collector would take a minute).
        for pod in pool.slurmd_pods("int01"):
            pool.lab.request("DELETE", f"/api/v1/namespaces/slurm/pods/{pod}?gracePeriodSeconds=0")
        wait_until(lambda: not pool.slurmd_pods("int01"), 60, "the slurmd pod to go")
        assert pool.slurm_node("int01") is not None
        run = pool.playbook("status")
        assert not run.failed, run.failures()
        assert "orphaned Slurm node int01: no Kubernetes Node" in run.output
        assert "rebalance.yml" in run.output
    finally:
        restore_node(pool, "int01")
    assert pool.journal("int01")["state"] == "free"  # a new Node: no journal
    run = pool.playbook("status")
    assert not run.failed, run.failures()
    assert "orphaned Slurm node int01: its Kubernetes Node came back" in run.output

    # No lend meanwhile (max_lent 0): only the orphan is at stake.
    policy = {
        **POLICY,
        "max_lent": 0,
        "partitions": {"backfill": {"grace_s": 5, "escalation": "requeue"}},
    }
    summary = tmp_path / "summary.json"
    # Slinky 1.2's operator marks the record of a vanished slurmd pod DOWN, which requeues
    # its job at once; where it does not, slurmctld counts the job as running until its own
    # timeouts, and the clean-up drains the record and requeues the job at the grace's end.
    stuck = "RUNNING" in pool.job(job_id)["job_state"]
    print(f"job {job_id} after the Node came back: {pool.job(job_id)['job_state']}")
    if stuck:
        run = pool.playbook("rebalance", handover_policy=policy, handover_summary_path=str(summary))
        assert not run.failed, run.failures()
        assert summary_of(summary)["draining"] == ["int01"]
        assert "1 orphaned Slurm node(s) draining" in run.output
        slurm_node = pool.slurm_node("int01")
        assert slurm_node is not None and "DRAIN" in slurm_node["state"]
        time.sleep(5)  # the partition's grace, from the drain
    else:
        # Requeued by DOWN, the job may hold the record COMPLETING a while on a loaded
        # machine (a cold run: the clean-up rightly answered `draining`): it is removed
        # once slurmctld lets go of it.
        wait_until(
            lambda: (
                not {"ALLOCATED", "MIXED", "COMPLETING"}
                & set((pool.slurm_node("int01") or {"state": []})["state"])
            ),
            120,
            f"slurmctld to let go of int01 after requeueing job {job_id}",
            lambda: ((pool.slurm_node("int01") or {}).get("state"), pool.job(job_id)["job_state"]),
        )
    run = pool.playbook("rebalance", handover_policy=policy, handover_summary_path=str(summary))
    assert not run.failed, run.failures()
    assert summary_of(summary)["nodes"]["int01"] == "removed"
    assert pool.slurm_node("int01") is None
    record = pool.job(job_id)
    assert "PENDING" in record["job_state"] and record["restart_cnt"] >= 1, record["job_state"]
    assert "orphaned Slurm node" not in pool.playbook("status").output


def test_an_application_pod_on_a_lent_node_is_reported_with_what_to_do(clean_pool: Pool) -> None:
    """The pod tolerates the lent taint: status says so and what a rebalance does about the
    node (apps_beside_slurmd); the rebalance gives the node back to the applications, where
    the pod keeps running, and still names the workload's toleration."""
    pool = clean_pool
    assert not pool.handover("lend", ["int01"]).failed
    pool.app_pod("tolerant", {"kubernetes.io/hostname": "int01"}, cpu="1", tolerate_lent=True)
    wait_until(lambda: pool.running_on("tolerant") == "int01", 30, "the pod to run on int01")
    policy = {**POLICY, "max_changes_per_run": 1, "max_lent": 0}
    run = pool.playbook("status", handover_policy=policy)
    assert not run.failed, run.failures()
    assert "application pod jupyterhub/tolerant runs on lent node int01 (lent)" in run.output
    assert "remove that toleration from its workload" in run.output
    assert "node int01: apps_beside_slurmd (journal lent" in run.output
    run = pool.playbook("rebalance", handover_policy=policy)
    assert not run.failed, run.failures()
    assert "1 disagreement(s): int01 apps_beside_slurmd (given back)" in run.output
    assert "remove that toleration from its workload" in run.output
    pool.assert_clean("int01")
    assert pool.running_on("tolerant") == "int01"
