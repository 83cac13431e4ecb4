# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Scheduled handover runs (role handover_schedule) against the lab.

In the cluster: the role's CronJob, ServiceAccount, RBAC and Slinky Token on the real
apiserver; the real controller-manager makes Jobs from the CronJob; the real operator signs
the Token's JWT; the apiserver's RBAC answers a SubjectAccessReview per rule, allowed and
denied; and a rebalance run with the ServiceAccount's own token and the inventory the role
wrote (what the CronJob's pod runs) lends, reclaims and reports.  kwok runs no containers,
so the Jobs' pods do not run the image; that run is made here with the same inventory,
identity and playbook.

On this machine as a management host: the systemd units pass ``systemd-analyze verify``,
testinfra checks the files, owners and modes, and two runs started together never overlap.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import time
import typing as t
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import k8s_binaries
import pytest
import testinfra
import yaml
from ansible_runner import COLLECTIONS, run_playbook
from grafana_schema import dashboard_errors
from handover_pool import APPS, PLAYBOOKS, POLICY, Pool
from k8s_lab import K8sLab
from prometheus_client.parser import text_string_to_metric_families
from slurm_pods import REST_ADDRESS
from toolbox import wait_until

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.report import (
    metrics_text,
    run_summary,
)

pytest_plugins = ["k8s_fixtures", "handover_pool"]
pytestmark = pytest.mark.integration

NAME = "hpcops-slinky-handover"
NS = "slurm"
IMAGE = "registry.lab.invalid/hpcops-slinky-ee:0.1.0"
TOKEN_SECRET = f"{NAME}-slurm-token"
STATUS = "hpcops-slinky-handover-status"
DASHBOARD = Path(__file__).parents[2] / "roles/handover_schedule/files"
DASHBOARD /= "hpcops-slinky-handover-dashboard.json"
# The CronJob's pods run on svc01, outside the pool: kwok marks them Running, and a pod on
# a pool node would hold it back from a lend.
SCHEDULE = {
    "handover_schedule_image": IMAGE,
    "handover_schedule_every_min": 1,
    "handover_schedule_node_selector": {"kubernetes.io/hostname": "svc01"},
}


def gauges(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(name, labels) -> value of the handover's metrics, parsed by Prometheus' own client
    parser (which fails on anything the text format does not allow)."""
    found = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("hpcops_slinky_handover_"):
            continue  # a Pushgateway's own metrics
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def gauge(found: dict[t.Any, float], name: str, **labels: str) -> float:
    return found[
        (f"hpcops_slinky_handover_{name}", frozenset({"cluster": "lab", **labels}.items()))
    ]


def account_kubeconfig(lab: K8sLab, path: Path, namespace: str = NS, name: str = NAME) -> Path:
    """A kubeconfig with a fresh token of the runs' ServiceAccount (the CronJob pod's
    identity), the CA inline so that any user can use it."""
    status, body = lab.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, body
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": lab.url,
                    "certificate-authority-data": base64.b64encode(
                        lab.ca_path.read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": body["status"]["token"]}}],
        "contexts": [{"name": name, "context": {"cluster": "lab", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: t.Any) -> Iterator[str]:
    """A real Prometheus Pushgateway on 127.0.0.1, stopped by its pid."""
    address = "127.0.0.1:16491"
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                str(k8s_binaries.ensure(["pushgateway"])["pushgateway"]),
                f"--web.listen-address={address}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{address}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:  # noqa: S310
                return bool(answer.status == 200)
        except OSError:
            assert process.poll() is None, log.read_text()
            return False

    wait_until(ready, 30, f"the Pushgateway on {address}")
    yield url
    process.terminate()
    process.wait(10)


def schedule_applied(pool: Pool, settings: dict[str, t.Any], *made: str) -> Iterator[Pool]:
    """The role applied with `settings`, as schedule.yml does; removed afterwards, with
    what it made (the API paths in `made` besides the account, RBAC and Token) gone."""
    run = pool.playbook("schedule", **settings)
    assert not run.failed, run.failures()
    yield pool
    run = pool.playbook("schedule", **{**settings, "handover_schedule_state": "absent"})
    assert not run.failed, run.failures()
    for path in (
        *made,
        f"/api/v1/namespaces/{NS}/serviceaccounts/{NAME}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{NAME}",
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/tokens/{NAME}",
    ):
        assert pool.lab.request("GET", path)[0] == 404, path


@pytest.fixture(scope="module")
def scheduled(pool: Pool) -> Iterator[Pool]:
    """The role applied in CronJob mode."""
    yield from schedule_applied(pool, SCHEDULE, f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("handover_schedule_image", "", "handover_schedule_image: is empty; build the execution"),
        (
            "handover_schedule_every_min",
            0,
            "handover_schedule_every_min whole minutes from 1 to 59",
        ),
        ("handover_schedule_kind", "cron", "handover_schedule_kind"),
        ("handover_lease_namespace", "kube-system", "handover_lease_namespace (kube-system) and"),
    ],
)
def test_bad_settings_name_the_setting_and_make_nothing(
    pool: Pool, setting: str, value: t.Any, named: str
) -> None:
    run = pool.playbook("schedule", **{**SCHEDULE, setting: value, "handover_schedule_name": "bad"})
    assert run.failed
    assert any(named in message for message in run.failures()), run.failures()
    assert "Traceback" not in run.output
    assert pool.lab.request("GET", f"/apis/batch/v1/namespaces/{NS}/cronjobs/bad")[0] == 404
    assert pool.lab.request("GET", f"/api/v1/namespaces/{NS}/serviceaccounts/bad")[0] == 404


def test_the_role_makes_the_cronjob_its_account_rbac_token_and_dashboard(scheduled: Pool) -> None:
    lab = scheduled.lab
    cron = lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")["spec"]
    assert cron["schedule"] == "*/1 * * * *"
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["startingDeadlineSeconds"] == 120
    assert (cron["successfulJobsHistoryLimit"], cron["failedJobsHistoryLimit"]) == (3, 5)
    job = cron["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] == 900
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == NAME and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    assert container["command"][-1] == "hpcops.slinky.rebalance"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    # The inventory of the runs carries this site's handover settings, resolved.
    inventory = yaml.safe_load(
        lab.get(f"/api/v1/namespaces/{NS}/configmaps/{NAME}-inventory")["data"]["inventory.yml"]
    )
    settings = inventory["all"]["vars"]
    # With the Token's name, to ask for a new JWT when its renewal has stopped.
    assert settings["handover_slurm_token_secret"] == {
        "namespace": NS,
        "name": TOKEN_SECRET,
        "key": "auth-token",
        "token": NAME,
    }
    assert settings["handover_slurm_user"] == "slurm"
    assert settings["handover_policy"]["pool_selector"] == {"hpcops.io/pool": "interactive"}
    assert settings["handover_policy"]["headroom"] == POLICY["headroom"]
    assert settings["handover_nodeset_namespace"] == NS
    assert "slinky_controller" in inventory["all"]["children"]

    token = lab.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/tokens/{NAME}")["spec"]
    assert token["username"] == "slurm" and token["refresh"] is True
    assert token["jwtKeyRef"] == {"name": "slurm-jwt-key", "key": "jwt_hs256.key"}

    dashboard = lab.get(f"/api/v1/namespaces/{NS}/configmaps/{NAME}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["hpcops-slinky-handover.json"]) == json.loads(
        DASHBOARD.read_text()
    )


def test_applying_the_role_again_changes_nothing(scheduled: Pool) -> None:
    run = scheduled.playbook("schedule", **SCHEDULE)
    assert not run.failed, run.failures()
    assert run.changed == 0, run.changed_tasks()
    check = scheduled.playbook(
        "schedule", check=True, **{**SCHEDULE, "handover_schedule_every_min": 7}
    )
    assert not check.failed, check.failures()
    assert [task.split(" : ")[-1] for task in check.changed_tasks()] == [
        "Apply the CronJob and the inventory of its runs, state present"
    ]
    cron = scheduled.lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")
    assert cron["spec"]["schedule"] == "*/1 * * * *"  # check mode wrote nothing


def test_the_controller_manager_makes_jobs_from_the_cronjob(scheduled: Pool) -> None:
    lab = scheduled.lab

    def jobs() -> list[dict[str, t.Any]]:
        return [
            job
            for job in lab.get(f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]
            if any(o["name"] == NAME for o in job["metadata"].get("ownerReferences") or [])
        ]

    made = wait_until(jobs, 75, "the controller-manager to make a Job from the CronJob")
    pod = made[0]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "svc01"}
    cron = wait_until(
        lambda: lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")["status"].get(
            "lastScheduleTime"
        ),
        30,
        "the CronJob's lastScheduleTime",
    )
    assert cron
    # Suspended, the CronJob stays; no Job of it runs while the other tests act.
    run = scheduled.playbook("schedule", handover_schedule_suspend=True, **SCHEDULE)
    assert not run.failed, run.failures()
    assert lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{NAME}")["spec"]["suspend"] is True


def slurm_token(lab: K8sLab) -> str:
    def written() -> str:
        status, body = lab.request("GET", f"/api/v1/namespaces/{NS}/secrets/{TOKEN_SECRET}")
        if status != 200:
            return ""
        return base64.b64decode(body["data"]["auth-token"]).decode()

    return wait_until(written, 60, "the operator to write the Token's Secret")


def test_the_operator_keeps_a_jwt_slurmrestd_accepts_in_the_token_secret(scheduled: Pool) -> None:
    token = slurm_token(scheduled.lab)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sun"] == "slurm"
    assert claims["exp"] - claims["iat"] == 3600
    request = urllib.request.Request(
        f"http://{REST_ADDRESS}/slurm/{scheduled.slurm.api}/diag",
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (the lab's, on 127.0.0.1)
        assert answer.status == 200
        assert not json.loads(answer.read()).get("errors")


# (verb, group, resource, namespace, name) and whether the runs' account may do it. Each
# allowed rule is a call the protocol makes; each denied one is near it and not needed.
ACCESS = [
    ("get", "", "nodes", "", "int01", True),
    ("list", "", "nodes", "", "", True),
    ("patch", "", "nodes", "", "int01", True),
    ("update", "", "nodes", "", "int01", False),
    ("delete", "", "nodes", "", "int01", False),
    ("create", "", "nodes", "", "", False),
    ("list", "", "pods", "", "", True),
    ("list", "", "pods", APPS, "", True),
    ("delete", "", "pods", NS, "slurm-worker-interactive-x", True),
    ("delete", "", "pods", APPS, "notebook", False),
    ("create", "", "pods", NS, "", False),
    ("create", "", "pods/eviction", APPS, "notebook", False),
    ("create", "", "events", "default", "", True),
    ("create", "", "events", NS, "", True),
    ("create", "", "events", APPS, "", False),
    ("delete", "", "events", "default", "", False),
    ("create", "coordination.k8s.io", "leases", NS, "", True),
    ("get", "coordination.k8s.io", "leases", NS, "hpcops-slinky-handover", True),
    ("update", "coordination.k8s.io", "leases", NS, "hpcops-slinky-handover", True),
    ("delete", "coordination.k8s.io", "leases", NS, "hpcops-slinky-handover", True),
    ("update", "coordination.k8s.io", "leases", NS, "slurm-operator", False),
    ("update", "coordination.k8s.io", "leases", "kube-system", "hpcops-slinky-handover", False),
    ("list", "slinky.slurm.net", "nodesets", NS, "", True),
    ("patch", "slinky.slurm.net", "nodesets", NS, "slurm-worker-interactive", True),
    ("list", "slinky.slurm.net", "nodesets", "", "", False),
    ("delete", "slinky.slurm.net", "nodesets", NS, "slurm-worker-interactive", False),
    ("update", "slinky.slurm.net", "nodesets", NS, "slurm-worker-interactive", False),
    ("get", "", "secrets", NS, TOKEN_SECRET, True),
    ("get", "", "secrets", NS, "slurm-jwt-key", False),
    ("list", "", "secrets", NS, "", False),
    ("update", "", "secrets", NS, TOKEN_SECRET, False),
    ("create", "", "configmaps", NS, "", True),
    ("get", "", "configmaps", NS, STATUS, True),
    ("patch", "", "configmaps", NS, STATUS, True),
    ("patch", "", "configmaps", NS, "slurm-config", False),
    ("delete", "", "configmaps", NS, STATUS, False),
    # The loans, one ConfigMap per calendar month (the lending report); no thirteenth.
    ("get", "", "configmaps", NS, f"{STATUS}-loans-01", True),
    ("patch", "", "configmaps", NS, f"{STATUS}-loans-12", True),
    ("patch", "", "configmaps", NS, f"{STATUS}-loans-13", False),
    # The runs' Token, to ask for a new JWT when its renewal has stopped; no other Token.
    ("get", "slinky.slurm.net", "tokens", NS, NAME, True),
    ("patch", "slinky.slurm.net", "tokens", NS, NAME, True),
    ("patch", "slinky.slurm.net", "tokens", NS, "slurm-restapi", False),
    ("delete", "slinky.slurm.net", "tokens", NS, NAME, False),
    ("list", "slinky.slurm.net", "tokens", NS, "", False),
    ("create", "batch", "jobs", NS, "", False),
]


@pytest.mark.parametrize(
    ("verb", "group", "resource", "namespace", "name", "allowed"),
    ACCESS,
    ids=[
        f"{'allow' if a[5] else 'deny'}-{a[0]}-{a[2]}-{a[3] or 'all'}-{a[4] or 'any'}"
        for a in ACCESS
    ],
)
def test_rbac_allows_what_the_protocol_calls_and_denies_the_rest(
    scheduled: Pool, verb: str, group: str, resource: str, namespace: str, name: str, allowed: bool
) -> None:
    assert account_may(scheduled.lab, verb, group, resource, namespace, name) is allowed


def account_may(
    lab: K8sLab,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str,
    account: tuple[str, str] = (NS, NAME),
) -> bool:
    """The apiserver's answer (a SubjectAccessReview) for the runs' ServiceAccount (or the
    one named by account, its namespace and name)."""
    resource, _slash, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource}
    attributes.update(
        {
            k: v
            for k, v in (("namespace", namespace), ("name", name), ("subresource", subresource))
            if v
        }
    )
    status, review = lab.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{account[0]}:{account[1]}",
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{account[0]}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        },
    )
    assert status == 201, review
    return bool(review["status"].get("allowed", False))


def test_a_run_as_the_service_account_lends_reclaims_and_reports(
    scheduled: Pool, clean_pool: Pool, pushgateway: str, tmp_path: Path, secret_dir: Path
) -> None:
    """What the CronJob's pod runs: rebalance.yml with the role's inventory and nothing but
    the ServiceAccount's RBAC and the Token's JWT."""
    pool, lab = clean_pool, clean_pool.lab
    slurm_token(lab)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        lab.get(f"/api/v1/namespaces/{NS}/configmaps/{NAME}-inventory")["data"]["inventory.yml"]
    )
    kubeconfig = account_kubeconfig(lab, secret_dir / "kubeconfig")  # a token
    textfile = tmp_path / "hpcops_slinky_handover.prom"

    def scheduled_run() -> tuple[t.Any, dict[t.Any, float]]:
        run = run_playbook(
            PLAYBOOKS / "rebalance.yml",
            inventory,
            extra_vars={
                "handover_metrics_textfile_path": str(textfile),
                "handover_metrics_pushgateway_url": pushgateway,
            },
            env={"KUBECONFIG": str(kubeconfig)},
        )
        assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
        found = gauges(textfile.read_text())
        status = lab.get(f"/api/v1/namespaces/{NS}/configmaps/{STATUS}")["data"]
        assert gauges(status["metrics.prom"]) == found  # the same figures in the cluster
        # ... and on the Pushgateway, grouped by job and cluster.
        with urllib.request.urlopen(f"{pushgateway}/metrics", timeout=10) as answer:  # noqa: S310
            pushed = gauges(answer.read().decode())
        grouping = {("job", "hpcops_slinky_handover"), ("instance", "")}
        assert {(name, labels - grouping) for (name, labels) in pushed} == set(found)
        assert all(pushed[key] == found[(key[0], key[1] - grouping)] for key in pushed)
        return json.loads(status["summary.json"]), found

    summary, found = scheduled_run()
    runs = [summary]
    assert summary["lent"] == ["int01", "int02"], summary
    assert summary["success"] and summary["acted"]
    assert gauge(found, "last_run_nodes", result="lent") == 2
    assert gauge(found, "pool_nodes", state="lent") == 2
    assert gauge(found, "last_run_success") == 1
    assert gauge(found, "last_run_timestamp_seconds") == pytest.approx(time.time(), abs=120)
    for node in ("int01", "int02"):
        assert pool.journal(node)["state"] == "lent"
        pool.idle_slurm_node(node)

    # A notebook waits for a node: the next run takes one back for it.
    pool.app_pod("waiting", {"hpcops.io/pool": "interactive"}, cpu="1")
    summary, found = scheduled_run()
    runs.append(summary)
    assert len(summary["returned"]) == 1, summary
    node = summary["returned"][0]
    seconds = gauge(found, "reclaim_seconds", node=node)
    assert 0 < seconds == summary["reclaim_seconds"][node]
    assert gauge(found, "last_run_reclaim_max_seconds") == seconds
    assert gauge(found, "pool_nodes", state="lent") == 1
    wait_until(lambda: pool.running_on("waiting") == node, 60, "the notebook to run")

    # Each run left an Event on the status ConfigMap (earlier tests' runs left theirs too).
    events = lab.get(
        f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{STATUS}"
    )["items"]
    ours = [e for e in events if e["reportingInstance"] in (run["run"] for run in runs)]
    assert [e["reason"] for e in ours] == ["HandoverRun", "HandoverRun"], ours
    reclaim_event = next(e for e in ours if e["reportingInstance"] == summary["run"])
    assert "1 returned" in reclaim_event["message"]


# Slinky renews a Token's JWT at four fifths of its lifetime, until it stops for good: with
# lifetimes of seconds, 1.1.0 and 1.2.1 stopped after 1 to 8 renewals here (upstream fixed it
# after 1.2.1). A short lifetime makes the stop come within a minute or two.
STALL_TOKEN = "renewal-stall"
STALL_LIFETIME_S = 10
STALL_DEADLINE_S = 300


def secret_jwt_claims(lab: K8sLab, name: str, key: str) -> dict[str, t.Any]:
    """The claims of the JWT in a Secret ({} while there is none)."""
    status, body = lab.request("GET", f"/api/v1/namespaces/{NS}/secrets/{name}")
    if status != 200 or key not in (body.get("data") or {}):
        return {}
    token = base64.b64decode(body["data"][key]).decode()
    claims: dict[str, t.Any] = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    return claims


@pytest.fixture
def stalled_token(clean_pool: Pool) -> Iterator[dict[str, str]]:
    """A Slinky Token of 10 s whose renewal the operator has stopped."""
    lab = clean_pool.lab
    path = f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/tokens"
    secret = {"name": f"{STALL_TOKEN}-jwt", "key": "auth-token"}
    lab.apply(
        path,
        {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": "Token",
            "metadata": {"name": STALL_TOKEN},
            "spec": {
                "username": "slurm",
                "lifetime": f"{STALL_LIFETIME_S}s",
                "refresh": True,
                "jwtKeyRef": {"name": "slurm-jwt-key", "key": "jwt_hs256.key"},
                "secretRef": secret,
            },
        },
    )
    renewals: set[int] = set()

    def stopped() -> bool:
        claims = secret_jwt_claims(lab, **secret)
        renewals.update([claims["iat"]] if claims else [])
        return bool(claims) and time.time() > claims["exp"] + 5

    wait_until(stopped, STALL_DEADLINE_S, f"the operator to stop renewing {STALL_TOKEN}")
    print(
        f"\nthe operator renewed the {STALL_LIFETIME_S} s Token {len(renewals) - 1} time(s), then stopped"
    )
    yield {"namespace": NS, "token": STALL_TOKEN, **secret}
    lab.request("DELETE", f"{path}/{STALL_TOKEN}")
    lab.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/{secret['name']}")


def test_a_token_whose_renewal_stopped_is_reported_and_renewed_by_the_next_run(
    scheduled: Pool, clean_pool: Pool, stalled_token: dict[str, str]
) -> None:
    lab, secret = clean_pool.lab, {"name": stalled_token["name"], "key": stalled_token["key"]}
    expired = secret_jwt_claims(lab, **secret)

    # status.yml says so, with what to do, and shows no JWT.
    run = clean_pool.playbook("status")
    assert not run.failed, run.failures()
    assert f"WARNING: Token {NS}/{STALL_TOKEN}: its JWT expired" in run.output, run.output[-3000:]
    assert "renewal has stopped" in run.output and "annotate token" in run.output
    assert str(expired["exp"]) not in run.output  # no claim, no token

    # A run reading that Token's Secret, as the scheduled runs read theirs (the role gives
    # them the Token's name and RBAC to patch it), asks for a new JWT and works with it.
    started = time.time()
    run = clean_pool.playbook(
        "status", handover_slurm_token_secret=stalled_token, handover_slurm_user="slurm"
    )
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    assert "had stopped renewing its JWT; this run asked the operator for a new one" in run.output
    renewed = secret_jwt_claims(lab, **secret)
    assert renewed["iat"] >= int(started) and renewed["exp"] > expired["exp"]
    token = lab.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/tokens/{STALL_TOKEN}")
    asked = int(token["metadata"]["annotations"]["hpcops.io/renewal-requested"])
    print(
        f"renewed {renewed['iat'] - asked} s after the run asked; the run took {time.time() - started:.0f} s"
    )


def test_the_dashboard_is_a_grafana_dashboard_by_grafanas_schema() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard_errors(dashboard) == []
    # The check can fail: a misspelt panel field and a wrong type are named.
    broken = json.loads(DASHBOARD.read_text())
    broken["panels"][0]["gridpos"] = broken["panels"][0].pop("gridPos")
    broken["schemaVersion"] = "41"
    errors = dashboard_errors(broken)
    assert any(e.startswith("panels/0:") and "gridpos" in e for e in errors), errors
    assert any(e.startswith("schemaVersion:") for e in errors), errors
    # Every metric the panels query is one the runs write.
    exprs = " ".join(t_["expr"] for p in dashboard["panels"] for t_ in p["targets"])
    summary = run_summary(
        run_id="r",
        started=0.0,
        finished=1.0,
        handovers=[{"nodes": [{"node": "n", "result": "free", "steps": ["free"], "seconds": 1}]}],
        lease=None,
        pool=[],
    )
    written = {name for (name, _labels) in gauges(metrics_text(summary))}
    used = {
        word
        for word in exprs.replace("(", " ").replace("{", " ").split()
        if word.startswith("hpcops_")
    }
    assert used and used <= written, used - written


# -- systemd on this machine --------------------------------------------------------------

USER = "hpcops-slinky"


def management_host_applied(pool: Pool, settings: dict[str, t.Any]) -> Iterator[dict[str, Path]]:
    """The role in systemd mode on this machine with `settings` (the kind among them), its
    paths under a scratch directory that the runs' user can reach (nothing is enabled:
    systemd is not PID 1 here). Yields the paths."""
    root = Path(tempfile.mkdtemp(prefix="hpcops-management-host-"))
    root.chmod(0o755)
    # What `ansible-galaxy collection install -r requirements.yml -p` would leave there.
    collections = root / "collections" / "ansible_collections"
    for name, source in (
        ("hpcops/slinky", COLLECTIONS / "ansible_collections/hpcops/slinky"),
        (
            "kubernetes/core",
            Path(sysconfig.get_paths()["purelib"], "ansible_collections/kubernetes/core"),
        ),
    ):
        (collections / name).parent.mkdir(parents=True, exist_ok=True)
        (collections / name).symlink_to(source.resolve())
    paths = {
        "units": root / "systemd",
        "config": root / "etc",
        "textfile": root / "node-exporter",
        "kubeconfig": root / "etc" / "kubeconfig",
    }
    extra = {
        **SCHEDULE,
        "handover_schedule_unit_dir": str(paths["units"]),
        "handover_schedule_config_dir": str(paths["config"]),
        "handover_schedule_textfile_dir": str(paths["textfile"]),
        "handover_schedule_kubeconfig": str(paths["kubeconfig"]),
        # Debian's Python, which every user can run (the tests' own lives under /root); the
        # virtualenv is kept between runs, as on a real host.
        "handover_schedule_venv": str(k8s_binaries.CACHE_DIR / "management-host-venv"),
        "handover_schedule_python": "/usr/bin/python3",
        "handover_schedule_collections_path": str(collections.parent),
        "handover_schedule_lock_path": str(root / "lock" / "handover.lock"),
        "handover_schedule_systemd_enable": False,
        "ansible_become": False,  # the tests run as root; there is no sudo here
        **settings,
    }
    # The scratch directory holds the runs' kubeconfig (a token): removed however this ends.
    try:
        paths["units"].mkdir()
        (root / "lock").mkdir(mode=0o1777)
        (root / "lock").chmod(0o1777)
        run = pool.playbook("schedule", **extra)
        assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
        # The runs' kubeconfig: the ServiceAccount's, readable by the runs' user only.
        account_kubeconfig(pool.lab, paths["kubeconfig"])
        subprocess.run(["chown", f"{USER}:{USER}", str(paths["kubeconfig"])], check=True)
        yield paths
        run = pool.playbook("schedule", **{**extra, "handover_schedule_state": "absent"})
        assert not run.failed, run.failures()
        assert not list(paths["units"].iterdir())
    finally:
        subprocess.run(["userdel", USER], check=False)
        shutil.rmtree(root)


@pytest.fixture(scope="module")
def management_host(scheduled: Pool) -> Iterator[dict[str, Path]]:
    """The systemd kind on this machine (the timer is not enabled: systemd is not PID 1)."""
    yield from management_host_applied(scheduled, {"handover_schedule_kind": "systemd"})


def run_as_service_user(home: Path) -> list[str]:
    """The prefix that runs a command as the service's user, as systemd would, in `home`
    (its state directory, made here)."""
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", f"{USER}:{USER}", str(home)], check=True)
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--"]


def test_the_units_pass_systemd_analyze_verify(management_host: dict[str, Path]) -> None:
    units = [management_host["units"] / f"{NAME}.{kind}" for kind in ("service", "timer")]
    verify = subprocess.run(
        ["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True, check=False
    )
    assert verify.returncode == 0, verify.stderr
    # Nothing it warns of in our units (it may mention units of this machine).
    assert f"{NAME}." not in verify.stderr, verify.stderr
    timer = units[1].read_text()
    assert "OnCalendar=*:0/1\n" in timer and f"Unit={NAME}.service" in timer


def test_testinfra_files_owners_and_modes(management_host: dict[str, Path]) -> None:
    host = testinfra.get_host("local://")
    user = host.user(USER)
    assert user.exists and user.shell == "/usr/sbin/nologin" and user.uid < 1000
    for kind in ("service", "timer"):
        unit = host.file(str(management_host["units"] / f"{NAME}.{kind}"))
        assert unit.is_file and (unit.user, unit.group, unit.mode) == ("root", "root", 0o644)
    inventory = host.file(str(management_host["config"] / f"{NAME}.inventory.yml"))
    assert (inventory.user, inventory.group, inventory.mode) == ("root", USER, 0o640)
    assert "handover_slurm_token_secret" in inventory.content_string
    textfile = host.file(str(management_host["textfile"]))
    assert textfile.is_directory and textfile.group == USER and textfile.mode == 0o2775
    service = host.file(str(management_host["units"] / f"{NAME}.service")).content_string
    assert f"User={USER}\n" in service and "NoNewPrivileges=yes" in service


def service_command(unit: Path) -> tuple[list[str], dict[str, str]]:
    """ExecStart and Environment of the service, with the specifiers a manager would fill:
    %S its state directory, %T a private /tmp (PrivateTmp=yes)."""
    scratch = unit.parent.parent
    for name in ("state", "private-tmp"):
        (scratch / name).mkdir(exist_ok=True)
        (scratch / name).chmod(0o1777)
    text = unit.read_text().replace("%S", str(scratch / "state"))
    text = text.replace("%T", str(scratch / "private-tmp"))
    env = {"PATH": "/usr/bin:/bin"}
    argv: list[str] = []
    for line in text.splitlines():
        key, _equals, value = line.partition("=")
        if key == "Environment":
            name, _equals, val = value.partition("=")
            env[name] = val
        elif key == "ExecStart":
            argv = shlex.split(value)
    return argv, env


def test_two_runs_started_together_do_not_overlap(
    management_host: dict[str, Path], clean_pool: Pool
) -> None:
    """Both as the service would start them: as its user, in its state directory."""
    argv, env = service_command(management_host["units"] / f"{NAME}.service")
    home = Path(env["HOME"])
    as_user = run_as_service_user(home)
    logs = [home.parent / f"run-{i}.log" for i in range(2)]
    started = time.monotonic()
    runs = [
        subprocess.Popen(
            as_user + argv, env=env, cwd=home, stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        for log in logs
    ]
    ended: dict[int, float] = {}
    while len(ended) < len(runs) and time.monotonic() - started < 600:
        for i, run in enumerate(runs):
            if i not in ended and run.poll() is not None:
                ended[i] = time.monotonic() - started
        time.sleep(0.1)
    outputs = [log.read_text() for log in logs]
    assert [run.returncode for run in runs] == [0, 0], "\n".join(outputs)
    ran = [i for i, out in enumerate(outputs) if "PLAY RECAP" in out]
    assert len(ran) == 1, outputs  # one ran the playbook, the other found the lock and left
    skipped = 1 - ran[0]
    assert outputs[skipped].strip() == ""
    assert ended[skipped] < ended[ran[0]], ended  # it left while the other still ran
    # The metrics of the run that ran are where node_exporter reads them.
    found = gauges((management_host["textfile"] / "hpcops_slinky_handover.prom").read_text())
    assert gauge(found, "last_run_success") == 1
    assert gauge(found, "last_run_nodes", result="lent") == 2
