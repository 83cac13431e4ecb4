# SPDX-License-Identifier: GPL-3.0-or-later
"""The chart values every deploy role builds for inventories/example, against golden files.

Each role's ``values`` entry point builds its values without reading a chart or calling a
cluster, so this runs anywhere.  The golden files in ``golden/`` were read against the
charts' own values.yaml (versions in each file's header): a change to a role's values shows
here as a diff to review.  Regenerate them after a deliberate change with
``HPCOPS_UPDATE_GOLDEN=1 pytest tests/integration/test_role_values_golden.py`` and read
the diff before committing.
"""

from __future__ import annotations

import json
import os
import tempfile
import typing as t
from pathlib import Path

import pytest
import yaml
from ansible_runner import REPO, run_play

EXAMPLE_VARS = sorted((REPO / "inventories" / "example" / "group_vars" / "all").glob("*.yml"))
GOLDEN = Path(__file__).resolve().parent / "golden"
ROLES = {
    "cert_manager": "_cert_manager_helm_values",
    "slurm_operator": "_slurm_operator_helm_values",
    "slurm_cluster": "_slurm_cluster_helm_values",
    "gpu_operator": "_gpu_operator_helm_values",
    "keda": "_keda_helm_values",
}
# Which chart version's values.yaml each golden file was checked against.
CHECKED_AGAINST = {
    "cert_manager": "cert-manager v1.21.2 (deploy/charts/cert-manager, values.schema.json)",
    "slurm_operator": "slurm-operator 1.2.1 (helm/slurm-operator)",
    "slurm_cluster-1.2": "slurm 1.2.1 (helm/slurm; slurm.conf of operator v1.2.1), slinky_version 1.2.2",
    "slurm_cluster-1.1": "slurm 1.1.2 (helm/slurm; slurm.conf of operator v1.1.2), slinky_version 1.1.2",
    "gpu_operator": "gpu-operator v26.7.0 (deployments/gpu-operator)",
    "keda": "keda 2.20.2 (kedacore/charts keda/); ScaledObject CRD keda.sh/v1alpha1 of KEDA v2.20.2",
}


class IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as yamllint (and the rest of the repository) wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def example_nodes() -> list[dict[str, t.Any]]:
    """The example site's Kubernetes Nodes, as k8s_info returns them."""

    def node(name: str, pool: str, gpus: int = 0) -> dict[str, t.Any]:
        labels = {"kubernetes.io/hostname": name, "hpcops.io/pool": pool}
        allocatable = {"cpu": "64", "memory": "512Gi"}
        if gpus:
            labels |= {
                "hpcops.io/gpu": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
            }
            allocatable["nvidia.com/gpu"] = str(gpus)
        return {
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        }

    return [
        *(node(f"cpu{i:02d}", "slurm-cpu") for i in range(1, 17)),
        *(node(f"gpu{i:02d}", "slurm-gpu", gpus=8) for i in range(1, 9)),
        *(node(f"jup{i:02d}", "interactive") for i in range(1, 7)),
        *(node(f"inf{i:02d}", "interactive", gpus=8) for i in range(1, 3)),
    ]


# The example's own release line, and the other line the roles build values for.
LINE_OVERRIDES = {"1.2": {}, "1.1": {"slinky_version": "1.1.2"}}


def build(overrides: dict[str, t.Any]) -> dict[str, t.Any]:
    tasks: list[dict[str, t.Any]] = [
        {
            "name": f"values of {role}",
            "ansible.builtin.include_role": {
                "name": f"hpcops.slinky.{role}",
                "tasks_from": "values",
            },
        }
        for role in ROLES
    ]
    with tempfile.TemporaryDirectory(prefix="hpcops-golden-") as tmp:
        out = Path(tmp) / "values.json"
        # After the example's files, so it wins over them.
        override_file = Path(tmp) / "overrides.yml"
        override_file.write_text(yaml.safe_dump(overrides))
        dump = {role: f"{{{{ {fact} }}}}" for role, fact in ROLES.items()}
        dump["scaled_objects"] = "{{ _keda_scaled_objects }}"
        tasks.append(
            {
                "name": "write the values",
                "ansible.builtin.copy": {
                    "content": "{{ _dump | to_nice_json }}",
                    "dest": str(out),
                    "mode": "0600",
                },
                "vars": {"_dump": dump},
            }
        )
        play = [
            {
                "name": "values of inventories/example",
                "hosts": "localhost",
                "gather_facts": False,
                "vars_files": [*(str(path) for path in EXAMPLE_VARS), str(override_file)],
                # What the slurm_cluster role reads from the cluster in its validate step.
                "vars": {"_slurm_cluster_nodes": {"resources": example_nodes()}},
                "tasks": tasks,
            }
        ]
        run = run_play(play)
        assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
        values: dict[str, t.Any] = json.loads(out.read_text())
    return values


@pytest.fixture(scope="module")
def built_values() -> dict[str, t.Any]:
    return build(LINE_OVERRIDES["1.2"])


@pytest.fixture(scope="module")
def built_values_1_1() -> dict[str, t.Any]:
    return build(LINE_OVERRIDES["1.1"])


@pytest.mark.parametrize("name", [*ROLES, "scaled_objects", "slurm_cluster-1.1"])
def test_values_match_golden_file(
    built_values: dict[str, t.Any], built_values_1_1: dict[str, t.Any], name: str
) -> None:
    role, _sep, line = name.partition("-")
    key = f"{role}-{line or '1.2'}" if role == "slurm_cluster" else name
    built = built_values_1_1 if line == "1.1" else built_values
    golden = GOLDEN / f"{key}.yml"
    header = CHECKED_AGAINST.get(key, CHECKED_AGAINST["keda"])
    if os.environ.get("HPCOPS_UPDATE_GOLDEN"):
        golden.write_text(
            f"# Values hpcops.slinky builds for inventories/example; keys checked against\n"
            f"# {header}.\n"
            + yaml.dump(
                built[role],
                Dumper=IndentedDumper,
                explicit_start=True,
                sort_keys=True,
                width=100,
            )
        )
    assert built[role] == yaml.safe_load(golden.read_text()), (
        f"{key} values changed; compare with {golden} (HPCOPS_UPDATE_GOLDEN=1 rewrites it)"
    )


def test_autoscaled_nodeset_starts_at_its_minimum(built_values: dict[str, t.Any]) -> None:
    # KEDA owns the replica count; the chart only sets where it starts.
    assert built_values["slurm_cluster"]["nodesets"]["gpu"]["replicas"] == 0
    assert built_values["slurm_cluster"]["controller"]["metrics"]["enabled"] is True
    (scaled,) = built_values["scaled_objects"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "slurm-worker-gpu"
    assert scaled["spec"]["maxReplicaCount"] == 8
    trigger = scaled["spec"]["triggers"][0]["metadata"]
    assert trigger["query"] == 'sum(slurm_partition_jobs_pending{partition="gpu"})'
