# SPDX-License-Identifier: GPL-3.0-or-later
"""One user's day on real kubelets: SSH into the login set through MetalLB's address, the
site's directory everywhere, jobs under the user's own uid and gid.

The directory is Debian's slapd (molecule's create), with ada in physics and lin in
chemistry; nobody else. The users' homes are a share every kind node mounts, as a site's
NFS /home: their SSH keys are there, and a job's files land there, read back on this
machine with pytest-testinfra. Then the faults: the directory down, the login pod
restarted, and an address MetalLB cannot give.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra
from kind_cluster import INVENTORY, NAMESPACE, REPO, configured, kubectl, kubectl_json, wait

HOME = Path(os.environ.get("HPCOPS_KIND_HOME", "/nonexistent"))
DIRECTORY_NAMESPACE = "directory"
USERS = {"ada": (30001, "physics"), "lin": (30002, "chemistry")}
PARTITION = "batch"
LOGIN_SERVICE = "slurm-login-users"  # the release's login set `users`

pytestmark = pytest.mark.skipif(
    not configured() or not os.environ.get("HPCOPS_KIND_DIRECTORY"),
    reason="run by molecule verify, with the site's directory (local images)",
)


@dataclass
class Login:
    address: str
    keys: Path
    known_hosts: Path

    def ssh(
        self, user: str, command: str, *, timeout: float = 60, strict: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """`command` in a login shell of `user`, with that user's key."""
        return subprocess.run(
            ["ssh", "-i", str(self.keys / user), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
             "-o", f"UserKnownHostsFile={self.known_hosts}",
             "-o", f"StrictHostKeyChecking={'yes' if strict else 'accept-new'}",
             f"{user}@{self.address}", command],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def run(self, user: str, command: str) -> str:
        done = self.ssh(user, command)
        assert done.returncode == 0, f"{user}: {command}: {done.stderr}"
        return done.stdout.strip()


def login_service() -> dict[str, Any]:
    """The Service of the inventory's login set `users`."""
    service: dict[str, Any] = kubectl_json("get", "service", "-n", NAMESPACE, LOGIN_SERVICE)
    return service


def login_pods() -> list[dict[str, Any]]:
    pods = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=login")
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or []
    )


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Login]:
    """Each user's key in their home's authorized_keys (and carol's, whom the directory does
    not know), and the address MetalLB gave the login set."""
    keys = tmp_path_factory.mktemp("keys")
    for user in (*USERS, "carol"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / user)], check=True
        )
    for user, (uid, _group) in USERS.items():
        ssh_dir = HOME / user / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        authorized = ssh_dir / "authorized_keys"
        authorized.write_text((keys / f"{user}.pub").read_text())
        authorized.chmod(0o600)
        for path in (ssh_dir, authorized):
            os.chown(path, uid, uid)
    ingress = login_service()["status"]["loadBalancer"]["ingress"]
    yield Login(ingress[0]["ip"], keys, keys / "known_hosts")
    shutil.rmtree(keys, ignore_errors=True)  # private keys never outlive the tests


def squeue_state(login: Login, user: str, job_id: int) -> str:
    """The job's state in squeue; GONE once slurmctld has forgotten it."""
    done = login.ssh(user, f"squeue -h -j {job_id} -o %T")
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "GONE"


def wait_state(login: Login, user: str, job_id: int, wanted: str, timeout_s: float = 120) -> None:
    wait(lambda: squeue_state(login, user, job_id) == wanted, timeout_s, f"job {job_id} {wanted}")


def sbatch(login: Login, user: str, wrap: str, account: str) -> int:
    out = login.run(
        user, f"cd && sbatch --parsable -p {PARTITION} -A {account} -c 1 --mem=100M --wrap '{wrap}'"
    )
    return int(out.split(";")[0])


def test_a_directory_user_logs_in_through_metallb_and_is_themselves(login: Login) -> None:
    assert not login.address.startswith("10.96."), "the login Service's address is a cluster IP"
    for user, (uid, group) in USERS.items():
        assert login.run(user, "id -un; id -u; id -gn").split() == [user, str(uid), group]


def test_a_job_runs_under_the_users_uid_and_gid_and_writes_a_file_they_own(login: Login) -> None:
    job_id = sbatch(
        login,
        "ada",
        'id -u > "$HOME/job-$SLURM_JOB_ID.out"; id -g >> "$HOME/job-$SLURM_JOB_ID.out"',
        "physics",
    )
    wait(lambda: squeue_state(login, "ada", job_id) == "GONE", 120, f"job {job_id} to end")
    written = testinfra.get_host("local://").file(str(HOME / "ada" / f"job-{job_id}.out"))
    assert written.exists, "the job wrote nothing to the user's home"
    assert (written.uid, written.gid) == (30001, 30001)
    assert written.content_string.split() == ["30001", "30001"]
    state = login.run("ada", f"sacct -nX -j {job_id} -o State,User,Account -P")
    assert state == "COMPLETED|ada|physics"


def test_users_manage_their_own_jobs_only_and_two_groups_never_share_a_node(login: Login) -> None:
    """mcs/account: lin's job waits while ada's holds the node, though a core is free."""
    nodes = [
        line.split()
        for line in login.run("ada", f"sinfo -p {PARTITION} -h -N -o '%N %c'").splitlines()
    ]
    assert len(nodes) == 1 and int(nodes[0][1]) >= 2, (
        f"the check needs one node with 2 CPUs: {nodes}"
    )
    ada_job = sbatch(login, "ada", "sleep 300", "physics")
    wait_state(login, "ada", ada_job, "RUNNING")
    lin_job = sbatch(login, "lin", "sleep 300", "chemistry")
    try:
        time.sleep(5)  # a scheduling pass or two
        assert squeue_state(login, "lin", lin_job) == "PENDING"
        assert str(ada_job) in login.run("lin", "squeue -h -o %i")
        refused = login.ssh("lin", f"scancel {ada_job}")
        assert refused.returncode != 0 and "denied" in refused.stderr.lower(), refused.stderr
        assert squeue_state(login, "ada", ada_job) == "RUNNING"
        login.run("ada", f"scancel {ada_job}")
        wait_state(login, "lin", lin_job, "RUNNING")
    finally:
        login.ssh("ada", f"scancel {ada_job}")
        login.ssh("lin", f"scancel {lin_job}")


def test_a_user_the_directory_does_not_know_is_refused(login: Login) -> None:
    refused = login.ssh("carol", "true")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr


def scale_directory(replicas: int) -> None:
    kubectl("scale", "deployment/slapd", "-n", DIRECTORY_NAMESPACE, f"--replicas={replicas}")

    def settled() -> bool:
        pods = kubectl_json("get", "pods", "-n", DIRECTORY_NAMESPACE, "-l", "app=slapd")["items"]
        return len(pods) == replicas and all(ready(p) for p in pods)

    wait(settled, 120, f"the directory at {replicas} replicas")


def test_the_directory_down_stops_logins_not_jobs(login: Login) -> None:
    job_id = sbatch(login, "ada", "sleep 600", "physics")
    wait_state(login, "ada", job_id, "RUNNING")
    scale_directory(0)
    try:
        refused = login.ssh("ada", "true")
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
    finally:
        scale_directory(1)
    # nslcd asks again within its reconnect time.
    wait(
        lambda: login.ssh("ada", "true").returncode == 0,
        60,
        "ada's login once the directory is back",
    )
    assert squeue_state(login, "ada", job_id) == "RUNNING"
    login.run("ada", f"scancel {job_id}")


def test_a_restarted_login_pod_ends_sessions_not_jobs_and_keeps_its_host_keys(login: Login) -> None:
    job_id = sbatch(login, "ada", "sleep 600", "physics")
    wait_state(login, "ada", job_id, "RUNNING")
    session = subprocess.Popen(
        ["ssh", "-i", str(login.keys / "ada"), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={login.known_hosts}", f"ada@{login.address}", "sleep 300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(2)
    (pod,) = login_pods()
    kubectl("delete", "pod", "-n", NAMESPACE, pod["metadata"]["name"], "--wait=false")
    try:
        assert session.wait(timeout=90) != 0, "the session outlived its pod"
    finally:
        session.kill()
    wait(lambda: [p for p in login_pods() if ready(p)], 180, "a new login pod")
    # The host keys are the operator's Secret's: known_hosts still trusts the new pod.
    wait(
        lambda: login.ssh("ada", "true", strict=True).returncode == 0,
        60,
        "ada's login to the new pod",
    )
    assert squeue_state(login, "ada", job_id) == "RUNNING"
    login.run("ada", f"scancel {job_id}")


def site(tmp_path: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    extra_file = tmp_path / f"extra-{len(list(tmp_path.iterdir()))}.json"
    extra_file.write_text(json.dumps({"slinky_components": ["slurm_cluster"], **extra}))
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY),
         "--limit", "slinky_controller", str(REPO / "playbooks" / "site.yml"), "-e", f"@{extra_file}"],
        capture_output=True, text=True, timeout=900, check=False,
        env=dict(os.environ, ANSIBLE_NOCOLOR="true"),
    )  # fmt: skip


def test_an_address_metallb_cannot_give_is_named_and_taken_back(
    login: Login, tmp_path: Path
) -> None:
    """A second login set asking for the first one's address gets none: the run names it."""
    spare = {"node_selector": {"hpcops.io/pool": "services"}, "service": {"address": login.address}}
    try:
        run = site(
            tmp_path,
            # The inventory's login sets (extra vars are templated) and the spare one.
            slurm_cluster_login_sets="{{ _kind_login_sets | combine({'spare': "
            + json.dumps(spare)
            + "}) }}",
            # MetalLB refuses at once, but the spare set's pod must be ready first: 20 s was
            # too short for it on a machine running three test runs at once.
            slurm_cluster_wait_timeout_s=40,
        )
    finally:
        back = site(tmp_path)  # the site as its inventory has it, whatever happened
    assert run.returncode != 0
    # Where the failure lands (stdout or stderr) and how its quotes are escaped depend on
    # ansible-core's callback and terminal: both streams, the words before the quote.
    said = run.stdout + run.stderr
    assert "slurm-login-spare got no address from the cluster" in said, said[-3000:]
    assert "Traceback" not in said
    assert back.returncode == 0, back.stdout[-3000:]
    wait(lambda: len(login_pods()) == 1, 120, "the spare login set gone")
    assert login.ssh("ada", "true").returncode == 0
