# SPDX-License-Identifier: GPL-3.0-or-later
"""Which workloads a changed Secret rolls out, and the patch that does it."""

from __future__ import annotations

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.secret_rollout import (
    annotation_key,
    plan_rollouts,
    secret_digest,
)

TOKEN = {"auth-token": "ZXlKaGJHY2lPaUpJVXpJMU5pSjkuZXhwMQ=="}


def deployment(name: str, annotations: dict[str, str] | None = None) -> dict[str, t.Any]:
    template: dict[str, t.Any] = {"spec": {"containers": []}}
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return {"kind": "Deployment", "metadata": {"name": name}, "spec": {"template": template}}


def test_the_digest_follows_the_data_and_never_shows_it() -> None:
    digest = secret_digest(TOKEN)
    assert len(digest) == 16
    assert TOKEN["auth-token"] not in digest
    assert digest == secret_digest(dict(reversed(list(TOKEN.items()))))
    assert digest != secret_digest({"auth-token": "ZXhwMg=="})
    assert secret_digest(None) == secret_digest({})


def test_only_workloads_whose_pods_started_with_other_data_roll_out() -> None:
    digest = secret_digest(TOKEN)
    key = annotation_key("slurm-bridge-token")
    workloads = [
        deployment("slurm-bridge-scheduler", {key: digest}),
        deployment("slurm-bridge-admission", {key: "0123456789abcdef", "other": "x"}),
        deployment("slurm-bridge-controllers"),
    ]
    plans = plan_rollouts("slurm-bridge-token", digest, workloads)
    assert [(p.name, p.was) for p in plans] == [
        ("slurm-bridge-admission", "0123456789abcdef"),
        ("slurm-bridge-controllers", ""),
    ]
    assert plans[0].patch == {"spec": {"template": {"metadata": {"annotations": {key: digest}}}}}
    assert plan_rollouts("slurm-bridge-token", digest, [workloads[0]]) == []


def test_the_annotation_key_is_a_valid_kubernetes_name_part() -> None:
    assert annotation_key("slurm-bridge-token") == "hpcops.io/secret-slurm-bridge-token"
    assert len(annotation_key("x" * 100).split("/", 1)[1]) <= 63
