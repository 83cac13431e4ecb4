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
    "mariadb": "_mariadb_operator_helm_values",
    "slurm_cluster": "_slurm_cluster_helm_values",
    "slurm_bridge": "_slurm_bridge_helm_values",
    "gpu_operator": "_gpu_operator_helm_values",
    "keda": "_keda_helm_values",
    "metallb": "_metallb_helm_values",
}
# Which chart version's values.yaml each golden file was checked against.
CHECKED_AGAINST = {
    "cert_manager": "cert-manager v1.21.2 (deploy/charts/cert-manager, values.schema.json)",
    "slurm_operator": "slurm-operator 1.2.1 (helm/slurm-operator)",
    "mariadb": "mariadb-operator 25.10.2 (deploy/charts/mariadb-operator)",
    "mariadb_resource": "the MariaDB CRD (k8s.mariadb.com/v1alpha1) of mariadb-operator 25.10.2",
    "slurm_cluster-1.2": "slurm 1.2.1 (helm/slurm; slurm.conf of operator v1.2.1), slinky_version 1.2.2",
    "slurm_cluster-1.1": "slurm 1.1.2 (helm/slurm; slurm.conf of operator v1.1.2), slinky_version 1.1.2",
    "slurm_bridge": "slurm-bridge 1.2.1 (helm/slurm-bridge)",
    "gpu_operator": "gpu-operator v26.7.0 (deployments/gpu-operator)",
    "keda": "keda 2.20.2 (kedacore/charts keda/); ScaledObject CRD keda.sh/v1alpha1 of KEDA v2.20.2",
    "metallb": "metallb 0.16.2 (charts/metallb of go.universe.tf/metallb v0.16.2)",
    "metallb_resources": "the IPAddressPool and L2Advertisement CRDs (metallb.io/v1beta1) of MetalLB v0.16.2",
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
        *(node(f"svc{i:02d}", "services") for i in range(1, 4)),
        *(node(f"bri{i:02d}", "bridge") for i in range(1, 5)),
    ]


# The example's own release line, and the other line the roles build values for.
LINE_OVERRIDES = {"1.2": {}, "1.1": {"slinky_version": "1.1.2"}}
# The example read by KEDA straight from slurmctld, with a token (Slurm 26.05
# MetricsAuthUsers), instead of through its Prometheus.
SLURMCTLD_OVERRIDES = {
    "keda_metrics_source": "slurmctld",
    "keda_prometheus_url": "",
    "keda_slurmctld_token_secret": {"name": "slurmctld-metrics-token", "key": "token"},
}


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
        dump["mariadb_resource"] = "{{ _mariadb_resource }}"
        dump["metallb_resources"] = "{{ _metallb_resources }}"
        # What the keda role applies, in its order: TriggerAuthentications, ScaledObjects.
        dump["keda_objects"] = "{{ _keda_trigger_authentications + _keda_scaled_objects }}"
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


@pytest.fixture(scope="module")
def built_values_slurmctld() -> dict[str, t.Any]:
    return build(SLURMCTLD_OVERRIDES)


def compare_with_golden(key: str, built: t.Any, overrides: str = "") -> None:
    golden = GOLDEN / f"{key}.yml"
    header = CHECKED_AGAINST.get(key, CHECKED_AGAINST["keda"])
    if os.environ.get("HPCOPS_UPDATE_GOLDEN"):
        golden.write_text(
            (f"# With {overrides}:\n" if overrides else "")
            + "# Values hpcops.slinky builds for inventories/example; keys checked against\n"
            f"# {header}.\n"
            + yaml.dump(
                built,
                Dumper=IndentedDumper,
                explicit_start=True,
                sort_keys=True,
                width=100,
            )
        )
    assert built == yaml.safe_load(golden.read_text()), (
        f"{key} values changed; compare with {golden} (HPCOPS_UPDATE_GOLDEN=1 rewrites it)"
    )


@pytest.mark.parametrize(
    "name", [*ROLES, "scaled_objects", "mariadb_resource", "metallb_resources", "slurm_cluster-1.1"]
)
def test_values_match_golden_file(
    built_values: dict[str, t.Any], built_values_1_1: dict[str, t.Any], name: str
) -> None:
    role, _sep, line = name.partition("-")
    key = f"{role}-{line or '1.2'}" if role == "slurm_cluster" else name
    built = built_values_1_1 if line == "1.1" else built_values
    compare_with_golden(key, built[role])


def test_keda_objects_read_from_slurmctld_match_golden_file(
    built_values_slurmctld: dict[str, t.Any],
) -> None:
    compare_with_golden(
        "keda_objects-slurmctld",
        built_values_slurmctld["keda_objects"],
        "keda_metrics_source slurmctld and a token (SLURMCTLD_OVERRIDES), the keda role's objects",
    )


def test_slurmctld_source_needs_no_service_monitor(
    built_values_slurmctld: dict[str, t.Any],
) -> None:
    # slurmctld serves the metrics KEDA reads; nothing scrapes them.
    metrics = built_values_slurmctld["slurm_cluster"]["controller"]["metrics"]
    assert (metrics["enabled"], metrics["serviceMonitor"]["enabled"]) == (True, False)


def test_autoscaled_nodeset_starts_at_its_minimum(built_values: dict[str, t.Any]) -> None:
    # KEDA owns the replica count; the chart only sets where it starts.
    assert built_values["slurm_cluster"]["nodesets"]["gpu"]["replicas"] == 0
    assert built_values["slurm_cluster"]["controller"]["metrics"]["enabled"] is True
    (scaled,) = built_values["scaled_objects"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "slurm-worker-gpu"
    assert scaled["spec"]["maxReplicaCount"] == 8
    pending, widest = scaled["spec"]["triggers"]
    assert pending["metadata"]["query"] == 'max(slurm_partition_jobs_pending{partition="gpu"})'
    assert widest["metadata"]["query"] == (
        'max(slurm_partition_jobs_max_job_nodes_nohold{partition="gpu"})'
    )


def test_a_run_without_the_mariadb_component_keeps_the_database_an_earlier_run_made() -> None:
    # slinky_components: [slurm_cluster] on a site whose MariaDB has its own name: the
    # validate step found it (_slurm_cluster_mariadb_found), so slurmdbd is not repointed.
    built = build(
        {
            "slinky_components": ["slurm_cluster"],
            "mariadb_name": "acctdb",
            "mariadb_password_secret": {"name": "acctdb-password", "key": "pw"},
            "_slurm_cluster_mariadb_found": {"resources": [{"kind": "MariaDB"}]},
        }
    )
    storage = built["slurm_cluster"]["accounting"]["storageConfig"]
    assert (storage["host"], storage["passwordKeyRef"]) == (
        "acctdb",
        {"name": "acctdb-password", "key": "pw"},
    )


# The example's backfill without its max_time (8 hours), and a handover policy that cancels
# backfill's jobs at the end of its grace, written as a site would template it.
CANCELLING = {
    "slurm_cluster_backfill": {"grace_time_s": 300, "priority_tier": 1},
    "handover_policy": {
        "partitions": {
            "backfill": {
                "grace_s": "{{ slurm_cluster_backfill.grace_time_s }}",
                "escalation": "cancel",
            }
        }
    },
}


def test_backfill_jobs_fit_the_grace_of_a_reclaim_that_cancels_them() -> None:
    # The role reads the site's handover_policy (slurm_cluster_handover_policy).
    conf = build(CANCELLING)["slurm_cluster"]["partitions"]["backfill"]["configMap"]
    assert (conf["MaxTime"], conf["GraceTime"]) == ("0:05:00", "300")


def test_a_backfill_max_time_longer_than_a_cancelling_grace_stops_the_run() -> None:
    backfill = {**CANCELLING["slurm_cluster_backfill"], "max_time": "8:00:00"}
    with tempfile.TemporaryDirectory(prefix="hpcops-golden-") as tmp:
        override_file = Path(tmp) / "overrides.yml"
        override_file.write_text(yaml.safe_dump({**CANCELLING, "slurm_cluster_backfill": backfill}))
        run = run_play(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars_files": [*(str(path) for path in EXAMPLE_VARS), str(override_file)],
                    "vars": {"_slurm_cluster_nodes": {"resources": example_nodes()}},
                    "tasks": [
                        {
                            "name": "values",
                            "ansible.builtin.include_role": {
                                "name": "hpcops.slinky.slurm_cluster",
                                "tasks_from": "values",
                            },
                        }
                    ],
                }
            ]
        )
    assert run.failed, run.output[-2000:]
    assert "Traceback" not in run.output
    message = " ".join(run.failures())
    assert "slurm_cluster_backfill.max_time: '8:00:00' is longer than" in message, message
    assert "at most 0:05:00" in message, message


# One NodeSet as the slurm_cluster role lists it: pool hpc, partition batch, 0 to 2 replicas.
HPC = {
    "nodeset": "hpc",
    "name": "slurm-worker-hpc",
    "namespace": "slurm",
    "partition": "batch",
    "min_replicas": 0,
    "max_replicas": 2,
    "pending_jobs": 1,
    "metrics_url": "http://slurm-controller.slurm.svc:6817/metrics/partitions",
}
PROMETHEUS = {"keda_prometheus_url": "http://prometheus-operated.monitoring.svc:9090"}
SLURMCTLD = {"keda_metrics_source": "slurmctld"}
TOKEN = {"keda_slurmctld_token_secret": {"name": "slurmctld-metrics-token", "key": "token"}}


def keda_objects(cases: dict[str, dict[str, t.Any]]) -> dict[str, t.Any]:
    """The keda role's objects (TriggerAuthentications, then ScaledObjects) per case, each
    case the role's variables, from its `values` entry point alone."""
    tasks: list[dict[str, t.Any]] = []
    for name, variables in cases.items():
        tasks += [
            {
                "name": f"objects of {name}",
                "ansible.builtin.include_role": {
                    "name": "hpcops.slinky.keda",
                    "tasks_from": "values",
                },
                "vars": variables,
            },
            {
                "name": f"keep {name}",
                "ansible.builtin.set_fact": {
                    "_objects": (
                        "{{ _objects | default({}) | combine({"
                        + json.dumps(name)
                        + ": _keda_trigger_authentications + _keda_scaled_objects}) }}"
                    )
                },
            },
        ]
    with tempfile.TemporaryDirectory(prefix="hpcops-keda-") as tmp:
        out = Path(tmp) / "objects.json"
        tasks.append(
            {
                "name": "write the objects",
                "ansible.builtin.copy": {
                    "content": "{{ _objects | to_nice_json }}",
                    "dest": str(out),
                    "mode": "0600",
                },
            }
        )
        run = run_play([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])
        assert not run.failed, f"{run.failures()}\n{run.output[-3000:]}"
        objects: dict[str, t.Any] = json.loads(out.read_text())
    return objects


def keda_failure(variables: dict[str, t.Any]) -> str:
    """The message the keda role's `values` entry point stops with."""
    run = run_play(
        [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [
                    {
                        "name": "objects",
                        "ansible.builtin.include_role": {
                            "name": "hpcops.slinky.keda",
                            "tasks_from": "values",
                        },
                        "vars": variables,
                    }
                ],
            }
        ]
    )
    assert run.failed, run.output[-2000:]
    assert "Traceback" not in run.output
    return " ".join(run.failures())


@pytest.fixture(scope="module")
def hpc_objects() -> dict[str, t.Any]:
    floor = {"keda_scaled_nodesets": [{**HPC, "min_replicas": 1}]}
    return keda_objects(
        {
            "prometheus": {"keda_scaled_nodesets": [HPC], **PROMETHEUS},
            "slurmctld": {"keda_scaled_nodesets": [HPC], **SLURMCTLD},
            "slurmctld-token": {"keda_scaled_nodesets": [HPC], **SLURMCTLD, **TOKEN},
            # A token given for the Prometheus path is not used there.
            "prometheus-floor": {**floor, **PROMETHEUS, **TOKEN},
            "slurmctld-floor": {**floor, **SLURMCTLD},
        }
    )


SCALED_HPC_HEAD = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {
        "name": "slurm-worker-hpc",
        "namespace": "slurm",
        "labels": {
            "app.kubernetes.io/managed-by": "hpcops.slinky",
            "app.kubernetes.io/part-of": "slurm",
        },
    },
}
SCALED_HPC_SPEC = {
    "scaleTargetRef": {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "name": "slurm-worker-hpc",
    },
    # Slinky's guide: idle at 0, at least 1 while jobs are pending.
    "idleReplicaCount": 0,
    "minReplicaCount": 1,
    "maxReplicaCount": 2,
    "pollingInterval": 30,
    "cooldownPeriod": 300,
    "advanced": {
        "horizontalPodAutoscalerConfig": {
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}
        }
    },
}


def test_prometheus_path_queries_the_partition_twice(hpc_objects: dict[str, t.Any]) -> None:
    server = PROMETHEUS["keda_prometheus_url"]
    assert hpc_objects["prometheus"] == [
        {
            **SCALED_HPC_HEAD,
            "spec": {
                **SCALED_HPC_SPEC,
                "triggers": [
                    {
                        "name": "pending-jobs",
                        "type": "prometheus",
                        "metricType": "Value",
                        "metadata": {
                            "serverAddress": server,
                            "query": 'max(slurm_partition_jobs_pending{partition="batch"})',
                            "threshold": "1",
                        },
                    },
                    {
                        "name": "widest-pending-job",
                        "type": "prometheus",
                        "metricType": "AverageValue",
                        "metadata": {
                            "serverAddress": server,
                            "query": (
                                'max(slurm_partition_jobs_max_job_nodes_nohold{partition="batch"})'
                            ),
                            "threshold": "1",
                        },
                    },
                ],
            },
        }
    ]


def test_slurmctld_path_reads_slurmctld_without_prometheus(
    hpc_objects: dict[str, t.Any],
) -> None:
    url = HPC["metrics_url"]
    assert hpc_objects["slurmctld"] == [
        {
            **SCALED_HPC_HEAD,
            "spec": {
                **SCALED_HPC_SPEC,
                "triggers": [
                    {
                        "name": "pending-jobs",
                        "type": "metrics-api",
                        "metricType": "Value",
                        "useCachedMetrics": True,
                        "metadata": {
                            "url": url,
                            "format": "prometheus",
                            "valueLocation": 'slurm_partition_jobs_pending{partition="batch"}',
                            "targetValue": "1",
                        },
                    },
                    {
                        "name": "widest-pending-job",
                        "type": "metrics-api",
                        "metricType": "AverageValue",
                        "useCachedMetrics": True,
                        "metadata": {
                            "url": url,
                            "format": "prometheus",
                            "valueLocation": (
                                'slurm_partition_jobs_max_job_nodes_nohold{partition="batch"}'
                            ),
                            "targetValue": "1",
                        },
                    },
                ],
            },
        }
    ]


def test_slurmctld_token_goes_through_a_trigger_authentication(
    hpc_objects: dict[str, t.Any],
) -> None:
    auth, scaled = hpc_objects["slurmctld-token"]
    assert auth == {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {
            "name": "hpcops-slinky-slurmctld-metrics",
            "namespace": "slurm",
            "labels": {
                "app.kubernetes.io/managed-by": "hpcops.slinky",
                "app.kubernetes.io/part-of": "slurm",
            },
        },
        "spec": {
            "secretTargetRef": [
                {"parameter": "token", "name": "slurmctld-metrics-token", "key": "token"}
            ]
        },
    }
    for trigger in scaled["spec"]["triggers"]:
        assert trigger["metadata"]["authMode"] == "bearer"
        assert trigger["authenticationRef"] == {"name": "hpcops-slinky-slurmctld-metrics"}
    # Without a token, neither.
    (untokened,) = hpc_objects["slurmctld"]
    assert not any(
        "authenticationRef" in trigger or "authMode" in trigger["metadata"]
        for trigger in untokened["spec"]["triggers"]
    )


def test_a_floor_of_replicas_has_no_idle_count(hpc_objects: dict[str, t.Any]) -> None:
    # KEDA refuses idleReplicaCount >= minReplicaCount; a floor holds while nothing is
    # pending, and KEDA's webhook would warn that pollingInterval and cooldownPeriod are not
    # used (pollingInterval still is where the metrics are cached, on the slurmctld path).
    (prometheus,) = hpc_objects["prometheus-floor"]
    (_auth, slurmctld) = (None, *hpc_objects["slurmctld-floor"])
    for scaled in (prometheus, slurmctld):
        spec = scaled["spec"]
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 2)
        assert "idleReplicaCount" not in spec and "cooldownPeriod" not in spec
    assert "pollingInterval" not in prometheus["spec"]
    assert slurmctld["spec"]["pollingInterval"] == 30


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        (
            {"keda_scaled_nodesets": [HPC], "keda_metrics_source": "influxdb"},
            ["keda_metrics_source", "influxdb", "prometheus, slurmctld"],
        ),
        (
            {"keda_scaled_nodesets": [HPC]},
            ["keda_prometheus_url is empty", "slurm-worker-hpc", "keda_metrics_source"],
        ),
        (
            {"keda_scaled_nodesets": [{**HPC, "metrics_url": ""}], **SLURMCTLD},
            ["keda_scaled_nodesets", "slurm-worker-hpc", "metrics_url"],
        ),
        (
            {
                "keda_scaled_nodesets": [HPC],
                **SLURMCTLD,
                "keda_slurmctld_token_secret": {"name": "t"},
            },
            ["keda_slurmctld_token_secret", "{name: <Secret>, key: <key>}"],
        ),
    ],
    ids=["unknown-source", "prometheus-without-url", "slurmctld-without-url", "token-without-key"],
)
def test_keda_settings_that_cannot_work_stop_the_run(
    variables: dict[str, t.Any], words: list[str]
) -> None:
    message = keda_failure(variables)
    assert all(word in message for word in words), message
