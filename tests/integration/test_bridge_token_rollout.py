# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The CronJob that rolls slurm-bridge out after the operator renewed its token, on the lab.

slurm-bridge reads its slurmrestd token once, from an environment variable; the operator
renews the Token at four fifths of its lifetime. The slurm_bridge role's CronJob replaces the
bridge's pods once the Secret holds another token (hpcops.slinky.secret_rollout), with a
ServiceAccount that may read that Secret and patch the bridge's three Deployments.

Here the role's task file applies it to the real apiserver; the apiserver's RBAC answers a
SubjectAccessReview per rule; and the CronJob's own command (from the object the apiserver
keeps) runs on this machine with a token of that ServiceAccount, against Deployments named
as the bridge's (kwok runs their pods): the first look gives each its digest, a second
changes nothing, a renewed token rolls all three out. The bridge itself runs in kind
(molecule/default), where no image of the execution environment is built for the CronJob.
"""

from __future__ import annotations

import base64
import subprocess
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import ansible_env, run_play
from k8s_lab import K8sLab
from test_handover_schedule import account_kubeconfig, account_may
from toolbox import wait_until

pytest_plugins = ["k8s_fixtures"]
pytestmark = pytest.mark.integration

NS = "bridge-rollout"
ROLLOUT = "slurm-bridge-token-rollout"  # the role's name for it: <release>-token-rollout
SECRET = "slurm-bridge-token"
DEPLOYMENTS = ("slurm-bridge-scheduler", "slurm-bridge-admission", "slurm-bridge-controllers")
IMAGE = "registry.lab.invalid/hpcops-slinky-ee:0.1.0"
DIGEST_ANNOTATION = f"hpcops.io/secret-{SECRET}"


def apply_rollout(lab: K8sLab, **settings: t.Any) -> t.Any:
    """The role's task file on the lab, as site.yml's slurm_bridge role runs it."""
    play = [
        {
            "name": "the bridge's token rollout",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Apply the token rollout",
                    "ansible.builtin.include_role": {
                        "name": "hpcops.slinky.slurm_bridge",
                        "tasks_from": "token_rollout.yml",
                    },
                    "vars": {
                        "slurm_bridge_namespace": NS,
                        "slurm_bridge_token_rollout_image": IMAGE,
                        "slurm_bridge_node_selector": {"kubernetes.io/hostname": "svc01"},
                        **settings,
                    },
                }
            ],
        }
    ]
    return run_play(play, env={"K8S_AUTH_KUBECONFIG": str(lab.kubeconfig_path)})


def set_token(lab: K8sLab, jwt: str) -> None:
    """What the operator does at a renewal: the Secret's token replaced."""
    data = {"auth-token": base64.b64encode(jwt.encode()).decode()}
    status, body = lab.request(
        "PATCH",
        f"/api/v1/namespaces/{NS}/secrets/{SECRET}",
        {"data": data},
        content_type="application/merge-patch+json",
    )
    assert status == 200, body


def deployment(name: str) -> dict[str, t.Any]:
    container = {
        "name": "bridge",
        "image": f"registry.lab.invalid/{name}:1.2.1",
        "env": [
            {
                "name": "SLURM_JWT",
                "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "auth-token"}},
            }
        ],
    }
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "svc01"},
                    "containers": [container],
                },
            },
        },
    }


@pytest.fixture(scope="module")
def bridge(k8s_lab: K8sLab) -> Iterator[K8sLab]:
    """A namespace with the bridge's token Secret and three Deployments named as its own."""
    lab = k8s_lab
    lab.request("DELETE", f"/api/v1/namespaces/{NS}")
    wait_until(
        lambda: lab.request("GET", f"/api/v1/namespaces/{NS}")[0] == 404,
        120,
        "an old namespace gone",
    )
    lab.apply(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    lab.apply(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET},
            "data": {"auth-token": base64.b64encode(b"first-jwt").decode()},
        },
    )
    for name in DEPLOYMENTS:
        lab.apply(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
    yield lab
    lab.request("DELETE", f"/api/v1/namespaces/{NS}")


@pytest.fixture(scope="module")
def applied(bridge: K8sLab) -> K8sLab:
    run = apply_rollout(bridge)
    assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
    assert run.changed == 1
    return bridge


def cronjob(lab: K8sLab) -> dict[str, t.Any]:
    return lab.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{ROLLOUT}")


def test_the_role_makes_the_cronjob_and_an_account_for_the_bridges_deployments(
    applied: K8sLab,
) -> None:
    spec = cronjob(applied)["spec"]
    assert spec["schedule"] == "*/30 * * * *"  # within the last fifth of 24h
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == ROLLOUT
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "svc01"}
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"][:3] == [
        "ansible",
        "localhost",
        "--module-name=hpcops.slinky.secret_rollout",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    binding = applied.get(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings/{ROLLOUT}"
    )
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ROLLOUT, "namespace": NS}]


def test_applying_it_again_changes_nothing(applied: K8sLab) -> None:
    run = apply_rollout(applied)
    assert not run.failed, run.failures()
    assert run.changed == 0, run.changed_tasks()


ACCESS = [
    ("get", "", "secrets", SECRET, True),
    ("get", "", "secrets", "slurm-jwt-key", False),  # not the key that signs tokens
    ("list", "", "secrets", "", False),
    ("get", "apps", "deployments", "slurm-bridge-scheduler", True),
    ("patch", "apps", "deployments", "slurm-bridge-admission", True),
    ("patch", "apps", "deployments", "slurm-bridge-controllers", True),
    ("patch", "apps", "deployments", "some-other-app", False),
    ("delete", "apps", "deployments", "slurm-bridge-scheduler", False),
    ("create", "", "pods", "", False),
]


@pytest.mark.parametrize(
    ("verb", "group", "resource", "name", "allowed"),
    ACCESS,
    ids=[f"{'allow' if a[4] else 'deny'}-{a[0]}-{a[2]}-{a[3] or 'any'}" for a in ACCESS],
)
def test_its_account_may_read_the_token_and_patch_the_bridge_and_nothing_else(
    applied: K8sLab, verb: str, group: str, resource: str, name: str, allowed: bool
) -> None:
    assert account_may(applied, verb, group, resource, NS, name, (NS, ROLLOUT)) is allowed


def replica_sets(lab: K8sLab, name: str) -> int:
    return sum(
        1
        for rs in lab.get(f"/apis/apps/v1/namespaces/{NS}/replicasets")["items"]
        if rs["metadata"]["labels"].get("app.kubernetes.io/name") == name
    )


def digests(lab: K8sLab) -> dict[str, str | None]:
    return {
        name: lab.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["spec"]["template"][
            "metadata"
        ]
        .get("annotations", {})
        .get(DIGEST_ANNOTATION)
        for name in DEPLOYMENTS
    }


def test_the_cronjobs_command_as_its_account_rolls_the_bridge_out_after_a_renewal(
    applied: K8sLab, secret_dir: Path
) -> None:
    lab = applied
    command = cronjob(lab)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    env = ansible_env(
        KUBECONFIG=str(account_kubeconfig(lab, secret_dir / "kubeconfig", NS, ROLLOUT)),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
    )
    env.pop("K8S_AUTH_KUBECONFIG", None)

    def look() -> str:
        done = subprocess.run(  # the CronJob's own command, read from the apiserver
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said = done.stdout + done.stderr
        assert "first-jwt" not in said and "second-jwt" not in said  # no token in its output
        return done.stdout

    for name in DEPLOYMENTS:
        wait_until(lambda name=name: replica_sets(lab, name) == 1, 60, f"{name}'s first ReplicaSet")

    said = look()  # the first look: each gets the digest of the token it started with
    assert "CHANGED" in said, said
    first = digests(lab)
    assert None not in first.values() and len(set(first.values())) == 1, first

    said = look()  # nothing renewed: nothing rolled out
    assert "SUCCESS" in said and '"changed": false' in said, said
    assert digests(lab) == first

    set_token(lab, "second-jwt")  # the operator's renewal
    said = look()
    assert "CHANGED" in said, said
    for name in DEPLOYMENTS:
        assert f"Deployment/{name}" in said
    second = digests(lab)
    assert len(set(second.values())) == 1 and set(second.values()) != set(first.values()), second
    for name in DEPLOYMENTS:  # the controller replaced the pods: a ReplicaSet per token
        wait_until(lambda name=name: replica_sets(lab, name) == 3, 60, f"{name} rolled out")


def test_turned_off_the_cronjob_and_its_account_are_removed(applied: K8sLab) -> None:
    run = apply_rollout(applied, slurm_bridge_token_rollout=False)
    assert not run.failed, run.failures()
    for path in (
        f"/apis/batch/v1/namespaces/{NS}/cronjobs/{ROLLOUT}",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{ROLLOUT}",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/{ROLLOUT}",
    ):
        assert applied.request("GET", path)[0] == 404, path
