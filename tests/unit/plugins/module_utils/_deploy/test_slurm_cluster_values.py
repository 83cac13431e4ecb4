# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurm chart's values from node pools: pure function, no cluster needed."""

from __future__ import annotations

import subprocess
import time
import typing as t
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.deploy import (
    slurm_cluster_autoscaling,
    slurm_cluster_values,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.helm_chart import (
    ChartSourceError,
    chart_args,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
    CHART_LINES,
    ESCALATIONS,
    LOGFILE_COMMAND,
    ConfigError,
    build_values,
    cgroup_conf,
    controller_metrics_url,
    gres_type,
    mcs_settings,
    slurm_time,
    slurm_time_minutes,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ESCALATIONS as HANDOVER_ESCALATIONS,
)


def node(
    name: str, pool: str, gpus: int = 0, product: str = "NVIDIA-A100-SXM4-80GB"
) -> dict[str, t.Any]:
    labels = {"hpcops.io/pool": pool}
    allocatable: dict[str, str] = {"cpu": "32"}
    if gpus:
        labels["nvidia.com/gpu.product"] = product
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": allocatable}}


NODES = [
    node("int01", "interactive"),
    node("gpu01", "interactive", 4),
    node("gpu02", "interactive", 8, "NVIDIA-H100-80GB-HBM3"),
    node("hpc01", "slurm"),
    node("hpc02", "slurm"),
]
SETTINGS: dict[str, t.Any] = {
    "name": "site",
    "slurm_version": "26.05",
    "chart_version": "1.1.0",
    "pools": {
        "hpc": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm"}},
        "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
    },
    "backfill": {"max_time": "2:00:00", "grace_time_s": 60, "priority_tier": 1},
    "cgroup": {"CgroupPlugin": "autodetect", "ConstrainCores": True, "ConstrainSwapSpace": False},
    "mcs": "label:enforced,select",
}


def test_one_nodeset_per_gpu_product_in_a_mixed_pool() -> None:
    nodesets = build_values(SETTINGS, NODES)["nodesets"]
    assert sorted(nodesets) == [
        "hpc",
        "interactive",
        "interactive-a100",
        "interactive-h100",
        "slinky",
    ]
    assert nodesets["slinky"] == {"enabled": False}
    assert nodesets["interactive-a100"]["extraConfMap"] == {"Gres": ["gpu:a100:4"]}
    assert nodesets["interactive-h100"]["extraConfMap"] == {"Gres": ["gpu:h100:8"]}
    plain = nodesets["interactive"]["podSpec"]
    excluded = plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert excluded["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3",
    ]


def test_lendable_pool_follows_the_lent_label_and_tolerates_the_taint() -> None:
    lent = build_values(SETTINGS, NODES)["nodesets"]["interactive-a100"]
    assert lent["scalingMode"] == "DaemonSet"
    assert lent["podSpec"]["nodeSelector"]["hpcops.io/slurm-lent"] == "true"
    assert lent["podSpec"]["tolerations"] == [
        {"key": "hpcops.io/lent", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_dedicated_pool_is_a_statefulset_with_one_replica_per_node() -> None:
    hpc = build_values(SETTINGS, NODES)["nodesets"]["hpc"]
    assert (hpc["scalingMode"], hpc["replicas"]) == ("StatefulSet", 2)
    assert not hpc["podSpec"]["tolerations"]


def test_partitions_batch_and_backfill() -> None:
    partitions = build_values(SETTINGS, NODES)["partitions"]
    assert partitions["all"] == {"enabled": False}
    assert partitions["batch"]["nodesets"] == ["hpc"]
    assert partitions["batch"]["configMap"] == {
        "State": "UP",
        "Default": "YES",
        "MaxTime": "UNLIMITED",
        "PriorityTier": "10",
        "PreemptMode": "OFF",
    }
    backfill = partitions["backfill"]
    assert backfill["nodesets"] == ["interactive", "interactive-a100", "interactive-h100"]
    assert backfill["configMap"] == {
        "State": "UP",
        "PriorityTier": "1",
        "PreemptMode": "REQUEUE",
        "MaxTime": "2:00:00",
        "GraceTime": "60",
    }


# ---- backfill's limits follow the handover policy (issue 33) ----------------------------

# The role's default slurm_cluster_backfill: no max_time, so the escalation decides it.
BACKFILL_DEFAULT = {"grace_time_s": 300, "priority_tier": 1}


def backfill_conf(policy: t.Any, backfill: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    settings = {
        **SETTINGS,
        "backfill": BACKFILL_DEFAULT if backfill is None else backfill,
        "handover_policy": policy,
    }
    return build_values(settings, NODES)["partitions"]["backfill"]["configMap"]


def cancelled_after(grace_s: t.Any, escalation: str = "cancel") -> dict[str, t.Any]:
    return {"partitions": {"backfill": {"grace_s": grace_s, "escalation": escalation}}}


@pytest.mark.parametrize(
    "policy",
    [
        None,  # no handover_policy at all
        {},
        # The handover role's own defaults: its `partitions` name backfill with requeue.
        {"default_escalation": "cancel"},
        {"partitions": {"backfill": {"grace_s": "300", "escalation": "requeue"}}},
        {"partitions": {"backfill": {"escalation": "requeue"}}, "default_escalation": "wait"},
    ],
)
def test_requeued_backfill_jobs_keep_four_hours(policy: t.Any) -> None:
    conf = backfill_conf(policy)
    assert (conf["MaxTime"], conf["GraceTime"], conf["PreemptMode"]) == (
        "4:00:00",
        "300",
        "REQUEUE",
    )


def test_cancelled_backfill_jobs_fit_the_grace() -> None:
    conf = backfill_conf(cancelled_after(300))
    assert conf["MaxTime"] == "0:05:00"
    assert (conf["GraceTime"], conf["PreemptMode"]) == ("300", "REQUEUE")
    # From templating the grace is a string ("{{ slurm_cluster_backfill.grace_time_s }}").
    assert backfill_conf(cancelled_after("300"))["MaxTime"] == "0:05:00"


def test_waited_for_backfill_jobs_fit_the_grace_rounded_up_to_minutes() -> None:
    backfill = {"grace_time_s": 90, "priority_tier": 1}
    assert backfill_conf(cancelled_after(90, "wait"), backfill)["MaxTime"] == "0:02:00"
    zero = {"grace_time_s": 0, "priority_tier": 1}
    assert backfill_conf(cancelled_after(0, "wait"), zero)["MaxTime"] == "0:01:00"
    # A partition the site's `partitions` leaves out takes default_escalation and
    # default_grace_s, as the handover role gives it.
    policy = {
        "partitions": {"gpu": {"grace_s": 60, "escalation": "requeue"}},
        "default_escalation": "wait",
        "default_grace_s": 90,
    }
    assert backfill_conf(policy, backfill)["MaxTime"] == "0:02:00"


def test_a_site_max_time_within_the_grace_is_kept() -> None:
    backfill = {**BACKFILL_DEFAULT, "max_time": "4"}  # minutes
    assert backfill_conf(cancelled_after(300), backfill)["MaxTime"] == "4"
    at_most = {**BACKFILL_DEFAULT, "max_time": "0:05:00"}
    assert backfill_conf(cancelled_after(300), at_most)["MaxTime"] == "0:05:00"


@pytest.mark.parametrize(
    ("escalation", "fate"),
    [("cancel", "would be cancelled"), ("wait", "would hold their node past its grace")],
)
def test_a_site_max_time_longer_than_the_grace_is_refused(escalation: str, fate: str) -> None:
    backfill = {**BACKFILL_DEFAULT, "max_time": "1:00:00"}
    with pytest.raises(ConfigError, match=fate) as err:
        backfill_conf(cancelled_after(300, escalation), backfill)
    assert err.value.variable == "slurm_cluster_backfill.max_time"
    assert "at most 0:05:00" in str(err.value)
    assert "escalation requeue" in str(err.value)
    # The same partition's MaxTime through slurm_cluster_partitions is held to the grace too.
    own = {"backfill": {"pools": ["interactive"], "config": {"MaxTime": "UNLIMITED"}}}
    with pytest.raises(ConfigError, match=fate) as err:
        policy = cancelled_after(300, escalation)
        build_values(
            {
                **SETTINGS,
                "backfill": BACKFILL_DEFAULT,
                "partitions": own,
                "handover_policy": policy,
            },
            NODES,
        )
    assert err.value.variable == "slurm_cluster_partitions.backfill.config.MaxTime"


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (cancelled_after(120), r"120 s is not slurm_cluster_backfill\.grace_time_s \(300 s\)"),
        (cancelled_after("5m"), r"'5m' is not a number of seconds"),
        (cancelled_after(True), r"True is not a number of seconds"),
        # Left out where the site gives `partitions`: the handover takes default_grace_s.
        (
            {"partitions": {"backfill": {"escalation": "cancel"}}, "default_grace_s": 600},
            r"is not given, so the handover gives backfill's jobs handover_policy\.default_grace_s \(600 s\)",
        ),
    ],
)
def test_the_handovers_grace_of_backfill_must_be_its_grace_time(
    policy: dict[str, t.Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        backfill_conf(policy)
    assert err.value.variable == "handover_policy.partitions.backfill.grace_s"


@pytest.mark.parametrize(
    ("policy", "variable"),
    [
        (cancelled_after(300, "kill"), "handover_policy.partitions.backfill.escalation"),
        ({"default_escalation": "Requeue"}, "handover_policy.default_escalation"),
        ({"partitions": {"backfill": "requeue"}}, "handover_policy.partitions.backfill"),
    ],
)
def test_an_unknown_escalation_or_a_bad_entry_is_refused(
    policy: dict[str, t.Any], variable: str
) -> None:
    with pytest.raises(ConfigError) as err:
        backfill_conf(policy)
    assert err.value.variable == variable
    if variable.endswith("escalation"):
        assert "use one of requeue, cancel, wait" in str(err.value)


def test_the_escalations_are_the_handovers() -> None:
    assert ESCALATIONS == HANDOVER_ESCALATIONS


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("90", 90),  # minutes
        ("4:30", 5),  # minutes:seconds, rounded up as slurmctld does
        ("4:00:00", 240),
        ("0:05:00", 5),
        ("1-12", 2160),
        ("1-0:30", 1470),
        ("2-01:00:01", 2941),
    ],
)
def test_slurm_times(text: str, minutes: int) -> None:
    assert slurm_time_minutes(text) == minutes


def test_slurm_time_written_as_the_role_writes_max_time() -> None:
    assert [slurm_time(m) for m in (1, 5, 240, 1500)] == [
        "0:01:00",
        "0:05:00",
        "4:00:00",
        "1-01:00:00",
    ]
    assert slurm_time_minutes(slurm_time(1500)) == 1500


@pytest.mark.parametrize(
    ("batch", "backfill", "variable"),
    [
        ({"priority_tier": 1}, {"priority_tier": 1}, "slurm_cluster_backfill.priority_tier"),
        ({"priority_tier": 5}, {"priority_tier": 9}, "slurm_cluster_backfill.priority_tier"),
        ({"priority_tier": -1}, {}, "slurm_cluster_batch.priority_tier"),
        ({"priority_tier": "high"}, {}, "slurm_cluster_batch.priority_tier"),
    ],
)
def test_backfill_tier_must_be_below_batch(
    batch: dict[str, t.Any], backfill: dict[str, t.Any], variable: str
) -> None:
    # Equal tiers make partition_prio preemption a no-op: backfill jobs would keep the nodes.
    with pytest.raises(ConfigError, match=variable.replace(".", r"\.")):
        build_values({**SETTINGS, "batch": batch, "backfill": backfill}, NODES)


def test_slurm_conf_restated_for_chart_1_2_only() -> None:
    conf_11 = build_values(SETTINGS, NODES)["controller"]["extraConfMap"]
    conf_12 = build_values({**SETTINGS, "chart_version": "1.2.1"}, NODES)["controller"][
        "extraConfMap"
    ]
    assert "ProctrackType" not in conf_11  # chart 1.1 writes it itself
    assert conf_12["ProctrackType"] == "proctrack/cgroup"
    assert conf_12["GresTypes"] == "gpu"
    assert conf_11["MCSPlugin"] == "mcs/label"
    assert conf_11["PreemptType"] == "preempt/partition_prio"


def test_same_input_same_values() -> None:
    assert build_values(SETTINGS, NODES) == build_values(SETTINGS, list(reversed(NODES)))


def test_cgroup_conf_booleans_and_unknown_keys() -> None:
    assert cgroup_conf({"ConstrainCores": True, "AllowedSwapSpace": 0}, (26, 5)) == (
        "ConstrainCores=yes\nAllowedSwapSpace=0\n"
    )
    with pytest.raises(ConfigError, match=r"slurm_cluster_cgroup\.TaskAffinity"):
        cgroup_conf({"TaskAffinity": True}, (26, 5))
    with pytest.raises(ConfigError, match="slurm_cluster_slurm_version"):
        cgroup_conf({}, (23, 2))


@pytest.mark.parametrize(
    ("setting", "accounting", "release", "expected"),
    [
        ("none", False, (26, 5), {}),
        ("label", False, (26, 5), {"MCSPlugin": "mcs/label", "MCSParameters": "enforced,select"}),
        (
            "mcs/group:ondemand,noselect",
            False,
            (24, 11),
            {"MCSPlugin": "mcs/group", "MCSParameters": "ondemand,noselect"},
        ),
        (
            "account:enforced,select,privatedata",
            True,
            (26, 5),
            {"MCSPlugin": "mcs/account", "MCSParameters": "enforced,select,privatedata"},
        ),
    ],
)
def test_mcs_settings(
    setting: str, accounting: bool, release: tuple[int, int], expected: dict[str, str]
) -> None:
    assert mcs_settings(setting, accounting, release) == expected


@pytest.mark.parametrize(
    ("setting", "accounting", "release", "message"),
    [
        ("tenant", False, (26, 5), "unknown MCS plugin"),
        ("account", False, (26, 5), "needs Slurm accounting"),
        ("label", False, (24, 5), "24.11 or newer"),
        ("user:select,noselect", False, (26, 5), "contradict"),
        ("none:enforced", False, (26, 5), "takes no parameters"),
        ("group:strict", False, (26, 5), "unknown MCS parameters"),
    ],
)
def test_mcs_refusals(
    setting: str, accounting: bool, release: tuple[int, int], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        mcs_settings(setting, accounting, release)
    assert err.value.variable == "slurm_cluster_mcs"


def test_gres_type_names() -> None:
    assert gres_type("NVIDIA-A100-SXM4-80GB", {}) == "a100"
    assert gres_type("Tesla-V100-SXM2-16GB", {}) == "v100"
    assert gres_type("NVIDIA-A100-SXM4-80GB", {"NVIDIA-A100-SXM4-80GB": "a100_80g"}) == "a100_80g"


OFF_INTERACTIVE = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "hpcops.io/pool", "operator": "NotIn", "values": ["interactive"]}
                    ]
                }
            ]
        }
    }
}


@pytest.mark.parametrize("chart_version", ["1.1.0", "1.2.1"])
def test_slurms_services_stay_off_the_lendable_pools(chart_version: str) -> None:
    """slurmctld, slurmrestd or slurmdbd on an interactive node would keep it from every lend."""
    values = build_values({**SETTINGS, "chart_version": chart_version, "accounting": True}, NODES)
    for part in ("controller", "restapi", "accounting"):
        assert values[part]["podSpec"]["affinity"] == OFF_INTERACTIVE, part


def test_a_sites_own_node_affinity_for_a_service_is_kept() -> None:
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "site/ctl", "operator": "Exists"}]}
                ]
            }
        }
    }
    anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    settings = {
        **SETTINGS,
        "values": {
            "controller": {"podSpec": {"affinity": own}},
            "restapi": {"podSpec": {"affinity": anti}},
        },
    }
    values = build_values(settings, NODES)
    assert values["controller"]["podSpec"]["affinity"] == own
    # A pod affinity of the site's joins the role's node affinity.
    assert values["restapi"]["podSpec"]["affinity"] == {**anti, **OFF_INTERACTIVE}
    # No accounting: its pod is not there to place.
    assert "podSpec" not in values["accounting"]


def test_without_lendable_pools_the_services_go_anywhere() -> None:
    pools = {"hpc": SETTINGS["pools"]["hpc"]}
    values = build_values({**SETTINGS, "pools": pools}, NODES[3:])
    assert not values["controller"].get("podSpec", {}).get("affinity")


def test_pool_values_override_what_the_role_builds() -> None:
    settings = {
        **SETTINGS,
        "pools": {
            **SETTINGS["pools"],
            "hpc": {
                **SETTINGS["pools"]["hpc"],
                "values": {"slurmd": {"resources": {"limits": {"cpu": 30}}}},
            },
        },
    }
    hpc = build_values(settings, NODES)["nodesets"]["hpc"]
    assert hpc["slurmd"]["resources"] == {"limits": {"cpu": 30}}
    assert hpc["slurmd"]["image"]["repository"] == "ghcr.io/slinkyproject/slurmd"


@pytest.mark.parametrize(
    ("source", "version", "expected"),
    [
        (
            {"oci": "oci://mirror.example/charts/slurm"},
            "1.1.0",
            {
                "chart_ref": "oci://mirror.example/charts/slurm",
                "chart_repo_url": None,
                "chart_version": "1.1.0",
            },
        ),
        (
            {"repo": "https://helm.ngc.nvidia.com/nvidia", "name": "gpu-operator"},
            "v25.3.0",
            {
                "chart_ref": "gpu-operator",
                "chart_repo_url": "https://helm.ngc.nvidia.com/nvidia",
                "chart_version": "v25.3.0",
            },
        ),
        (
            {"path": "/srv/mirror/slurm-1.1.0.tgz"},
            "1.1.0",
            {
                "chart_ref": "/srv/mirror/slurm-1.1.0.tgz",
                "chart_repo_url": None,
                "chart_version": None,
            },
        ),
    ],
)
def test_chart_sources(source: dict[str, str], version: str, expected: dict[str, t.Any]) -> None:
    assert chart_args(source, version, "slurm_cluster_chart") == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({}, "found none"),
        ({"oci": "oci://a/b", "path": "/c"}, "found \\['oci', 'path'\\]"),
        ({"oci": "https://a/b"}, "does not start with oci://"),
        ({"repo": "https://a"}, "needs the chart's name"),
        ({"path": "/a", "name": "b"}, "name goes with repo only"),
        ({"url": "x"}, "unknown keys"),
        ("oci://a/b", "expected a mapping"),
    ],
)
def test_bad_chart_sources(source: t.Any, message: str) -> None:
    with pytest.raises(ChartSourceError, match=message) as err:
        chart_args(source, "1.1.0", "slurm_cluster_chart")
    assert err.value.variable == "slurm_cluster_chart"
    assert "exactly one of" in str(err.value)


def test_every_log_sidecar_uses_the_site_image() -> None:
    """The chart's slurmctld log sidecar defaults to alpine:latest: unpinned, not mirrored."""
    mirror = {"repository": "mirror.site/library/busybox", "tag": "1.38"}
    values = build_values({**SETTINGS, "logfile_image": mirror}, NODES)
    assert values["controller"]["logfile"] == {"image": mirror, "command": list(LOGFILE_COMMAND)}
    assert {
        n["logfile"]["image"]["repository"] for n in values["nodesets"].values() if n.get("enabled")
    } == {mirror["repository"]}
    # Unset, still pinned (the chart's own is alpine:latest).
    assert build_values(SETTINGS, NODES)["controller"]["logfile"]["image"]["tag"] == "3.22"
    with pytest.raises(ConfigError, match="slurm_cluster_logfile_image"):
        build_values({**SETTINGS, "logfile_image": "busybox"}, NODES)


def test_every_log_sidecar_runs_the_collections_program_unless_told_not_to() -> None:
    def sidecars(values: dict[str, t.Any]) -> list[dict[str, t.Any]]:
        return [
            values["controller"]["logfile"],
            *(n["logfile"] for n in values["nodesets"].values() if n.get("enabled")),
        ]

    assert {tuple(s["command"]) for s in sidecars(build_values(SETTINGS, NODES))} == {
        LOGFILE_COMMAND
    }
    kept = build_values({**SETTINGS, "logfile_stops_on_term": False}, NODES)  # Slinky's own
    assert all("command" not in s for s in sidecars(kept))


def prestop_hook(values: dict[str, t.Any], nodeset: str) -> list[str]:
    hook: list[str] = values["nodesets"][nodeset]["slurmd"]["lifecycle"]["preStop"]["exec"][
        "command"
    ]
    return hook


@pytest.mark.parametrize(("chart_version", "line"), [("1.1.0", (1, 1)), ("1.2.1", (1, 2))])
def test_lendable_slurmd_has_a_prestop_that_leaves_reclaims(
    chart_version: str, line: tuple[int, int]
) -> None:
    """Only the lendable NodeSets, with the line's own hook command in it; false keeps the
    operator's hook (no lifecycle of ours for its merge)."""
    settings = {**SETTINGS, "chart_version": chart_version}
    values = build_values(settings, NODES)
    for name in ("interactive", "interactive-a100", "interactive-h100"):
        shell, flag, script = prestop_hook(values, name)
        assert (shell, flag) == ("/usr/bin/sh", "-c"), name
        assert CHART_LINES[line].slurmd_prestop in script, name
    assert "lifecycle" not in values["nodesets"]["hpc"]["slurmd"]
    kept = build_values({**settings, "prestop_leaves_reclaims": False}, NODES)
    assert all("lifecycle" not in n.get("slurmd", {}) for n in kept["nodesets"].values())


@pytest.mark.parametrize(
    ("reason", "marked"),
    [
        ("hpcops: reclaim 6925e1a0-3f9c2e", False),  # the reclaim's drain: left to it
        ("hw: ECC errors", True),  # an admin's drain: the operator's hook
        ("", True),  # not drained (an eviction, an admin's delete): the operator's hook
    ],
)
def test_the_prestop_hook_marks_the_node_unless_a_reclaim_drained_it(
    tmp_path: Path, reason: str, marked: bool
) -> None:
    """Run for real against a stand-in scontrol that answers `show node` as Slurm does."""
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'if [ "$1" = show ]; then\n'
        f'  echo "NodeName=$3 Arch=x86_64 State=IDLE+DRAIN Reason={reason} [root@2026-12-01T19:00:00]"\n'
        "fi\n"
    )
    scontrol.chmod(0o755)
    values = build_values({**SETTINGS, "chart_version": "1.2.1"}, NODES)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(
        prestop_hook(values, "interactive"), capture_output=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done
    host = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    update = f"update nodename={host} state=down reason=slurm-operator: Pod is terminating"
    assert calls.read_text().splitlines() == [f"show node {host}"] + ([update] if marked else [])


def test_the_log_sidecars_program_copies_the_log_and_ends_at_once_on_sigterm(
    tmp_path: Path,
) -> None:
    """Run for real (sh here, busybox's in the images): what slurmd writes into the FIFO
    comes out, and SIGTERM ends it while it waits for the next writer, where a shell that
    runs its reader in the foreground would wait on with its trap (for ever: nobody opens
    the FIFO again once slurmd has stopped)."""
    fifo = tmp_path / "slurmd.log"
    output = tmp_path / "sidecar.out"
    with output.open("w") as out_file:
        sidecar = subprocess.Popen(
            list(LOGFILE_COMMAND),
            env={"SOCKET": str(fifo), "PATH": "/usr/bin:/bin"},
            stdout=out_file,
        )
    try:
        for _look in range(100):
            if fifo.is_fifo():
                break
            time.sleep(0.02)
        with fifo.open("w") as slurmd:  # blocks until the sidecar reads: then it writes
            slurmd.write("slurmd: started\n")
        time.sleep(1.5)  # past its pause: back at the FIFO, waiting for the next writer
        sidecar.terminate()
        returncode = sidecar.wait(timeout=10)
    finally:
        sidecar.kill()
    assert returncode == 0
    assert output.read_text() == "slurmd: started\n"
    # Its reader went with it: nobody holds the FIFO open.
    leftover = subprocess.run(["pgrep", "-f", f"cat {fifo}"], capture_output=True, check=False)
    assert leftover.stdout == b""


# ---- one values builder, two Slinky lines (issue 18's findings) -------------------------

LINE_12 = {**SETTINGS, "chart_version": "1.2.2"}


def sized(name: str, pool: str, cpus: str, memory: str, gpus: int = 0) -> dict[str, t.Any]:
    obj = node(name, pool, gpus)
    obj["status"]["allocatable"] |= {"cpu": cpus, "memory": memory}
    return obj


def test_gres_conf_maps_gpus_to_devices_on_both_lines() -> None:
    # 1.2 stopped writing gres.conf: Gres=gpu:<type>:<n> then had no device files.
    for settings in (SETTINGS, LINE_12):
        assert build_values(settings, NODES)["configFiles"]["gres.conf"] == "AutoDetect=nvidia\n"
    cpu_only = [n for n in NODES if "gpu" not in n["metadata"]["name"]]
    assert "gres.conf" not in build_values(LINE_12, cpu_only)["configFiles"]
    with pytest.raises(ConfigError, match="slurm_cluster_gres_autodetect"):
        build_values({**LINE_12, "gres_autodetect": "full"}, NODES)


def test_line_1_2_restates_what_its_operator_no_longer_writes() -> None:
    conf = build_values(LINE_12, NODES)["controller"]["extraConfMap"]
    assert conf["SlurmctldParameters"] == "enable_stepmgr"  # the operator merges its own in
    assert conf["CommunicationParameters"] == "block_null_hash"
    assert conf["LogTimeFormat"] == "iso8601,format_stderr"
    assert conf["JobAcctGatherType"] == "jobacct_gather/cgroup"
    # slurm.conf(5) of 24.11 to 26.05: "stack task/cgroup,task/affinity".
    assert conf["TaskPlugin"] == "task/cgroup,task/affinity"
    assert "AccountingStorageTRES" not in conf
    with_accounting = build_values({**LINE_12, "accounting": True}, NODES)
    assert with_accounting["controller"]["extraConfMap"]["AccountingStorageTRES"] == "gres/gpu"
    disabled = {**LINE_12, "cgroup": {"CgroupPlugin": "disabled"}}
    plain = build_values(disabled, NODES)["controller"]["extraConfMap"]
    assert (plain["ProctrackType"], plain["TaskPlugin"]) == ("proctrack/linuxproc", "task/affinity")
    assert "SlurmctldParameters" not in plain


def test_taint_kube_nodes_only_on_line_1_1() -> None:
    assert build_values(SETTINGS, NODES)["nodesets"]["hpc"]["taintKubeNodes"] is False
    nodesets = build_values(LINE_12, NODES)["nodesets"]
    assert all("taintKubeNodes" not in nodeset for nodeset in nodesets.values())
    for settings, variable in (
        (
            {**LINE_12, "nodeset_defaults": {"taintKubeNodes": False}},
            "slurm_cluster_nodeset_defaults",
        ),
        (
            {**LINE_12, "values": {"nodesets": {"hpc": {"taintKubeNodes": True}}}},
            "slurm_cluster_values.nodesets.hpc",
        ),
    ):
        with pytest.raises(ConfigError, match=rf"{variable}\.taintKubeNodes: Slinky 1\.2"):
            build_values(settings, NODES)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pinToNode", True),
        ("pruneSlurmNodeRecords", "NodeNotFound"),
        ("oversubscribeNode", True),
        ("updateStrategy", {"scheduledUpdate": {"startTime": "02:00"}}),
    ],
)
def test_fields_of_line_1_2_refused_on_1_1(field: str, value: t.Any) -> None:
    pools = {**SETTINGS["pools"], "hpc": {**SETTINGS["pools"]["hpc"], "values": {field: value}}}
    with pytest.raises(
        ConfigError, match=rf"slurm_cluster_pools\.hpc\.values\.{field}.*needs Slinky 1\.2"
    ):
        build_values({**SETTINGS, "pools": pools}, NODES)
    assert build_values({**LINE_12, "pools": pools}, NODES)["nodesets"]["hpc"][field] == value


def test_inplace_reconfigure_is_set_on_1_2_and_refused_on_1_1() -> None:
    assert build_values(LINE_12, NODES)["controller"]["inplaceReconfigure"] is False
    on = build_values({**LINE_12, "inplace_reconfigure": True}, NODES)
    assert on["controller"]["inplaceReconfigure"] is True
    assert "inplaceReconfigure" not in build_values(SETTINGS, NODES)["controller"]
    with pytest.raises(ConfigError, match="slurm_cluster_inplace_reconfigure"):
        build_values({**SETTINGS, "inplace_reconfigure": True}, NODES)


def test_chart_defaults_switched_off_on_1_1_only() -> None:
    old, new = build_values(SETTINGS, NODES), build_values(LINE_12, NODES)
    assert old["nodesets"]["slinky"] == {"enabled": False}
    assert old["partitions"]["all"] == {"enabled": False}
    assert "slinky" not in new["nodesets"] and "all" not in new["partitions"]
    assert new["loginsetDefaults"]["initconf"]["image"] == new["controller"]["logfile"]["image"]


def test_unsupported_chart_versions_are_refused() -> None:
    for version in ("1.0.5", "1.3.0", "1.2.9", "latest"):
        with pytest.raises(ConfigError, match=r"slurm_cluster_chart_version.*1\.1\.0, 1\.1\.1"):
            build_values({**SETTINGS, "chart_version": version}, NODES)


def test_autoscaling_makes_a_service_monitor_prometheus_can_find() -> None:
    pools = {
        **SETTINGS["pools"],
        "hpc": {**SETTINGS["pools"]["hpc"], "autoscale": {"max_replicas": 2}},
    }
    scaled = {**LINE_12, "pools": pools, "service_monitor_labels": {"release": "prometheus"}}
    metrics = build_values(scaled, NODES)["controller"]["metrics"]
    assert metrics["enabled"] is True
    assert metrics["serviceMonitor"] == {"enabled": True, "labels": {"release": "prometheus"}}
    off = build_values({**scaled, "service_monitor": False}, NODES)["controller"]["metrics"]
    assert (off["enabled"], off["serviceMonitor"]["enabled"]) == (True, False)
    none = build_values(LINE_12, NODES)["controller"]["metrics"]
    assert (none["enabled"], none["serviceMonitor"]["enabled"]) == (False, False)


def test_jobs_without_mem_get_a_share_of_the_node_per_cpu() -> None:
    nodes = [
        sized("hpc01", "slurm", "128", "515697884Ki"),  # 503611 MiB
        sized("hpc02", "slurm", "64", "256Gi"),
        sized("int01", "interactive", "2", "24Gi"),
    ]
    partitions = build_values(LINE_12, nodes)["partitions"]
    # The smallest memory per CPU of the pool's nodes, so a job on every CPU still fits.
    assert partitions["batch"]["configMap"]["DefMemPerCPU"] == str(min(503611 // 128, 4096))
    assert partitions["backfill"]["configMap"]["DefMemPerCPU"] == "12288"
    pools = {
        "hpc": {**SETTINGS["pools"]["hpc"], "default_mem_per_cpu_mib": 2000},
        "interactive": {
            **SETTINGS["pools"]["interactive"],
            "values": {"slurmd": {"resources": {"limits": {"cpu": "1500m", "memory": "4Gi"}}}},
        },
    }
    partitions = build_values({**LINE_12, "pools": pools}, nodes)["partitions"]
    assert partitions["batch"]["configMap"]["DefMemPerCPU"] == "2000"
    assert partitions["backfill"]["configMap"]["DefMemPerCPU"] == "4096"  # 4 GiB / 1 whole CPU
    site_wide = build_values({**LINE_12, "slurm_conf": {"DefMemPerNode": 1000}}, nodes)
    assert "DefMemPerCPU" not in site_wide["partitions"]["batch"]["configMap"]
    none = {
        "hpc": {**SETTINGS["pools"]["hpc"], "default_mem_per_cpu_mib": 0},
        "interactive": pools["interactive"],
    }
    assert (
        "DefMemPerCPU"
        not in build_values({**LINE_12, "pools": none}, nodes)["partitions"]["batch"]["configMap"]
    )
    with pytest.raises(ConfigError, match=r"slurm_cluster_pools\.hpc\.default_mem_per_cpu_mib"):
        build_values(
            {
                **LINE_12,
                "pools": {**pools, "hpc": {**pools["hpc"], "default_mem_per_cpu_mib": "lots"}},
            },
            nodes,
        )


def test_the_memory_per_cpu_times_the_cpus_fits_what_slurmd_registers() -> None:
    # A kind worker on this machine: 24684092Ki is 24105.55 MiB, which slurmd registers as
    # RealMemory=24105. 12053 per CPU (from 24106) made Slurm refuse every whole-node job
    # that gave no --mem: "Requested node configuration is not available".
    nodes = [sized("hpc01", "slurm", "2", "24684092Ki"), sized("int01", "interactive", "2", "24Gi")]
    per_cpu = int(build_values(LINE_12, nodes)["partitions"]["batch"]["configMap"]["DefMemPerCPU"])
    assert per_cpu == 12052
    assert per_cpu * 2 <= 24684092 // 1024
    pools = {
        **SETTINGS["pools"],
        "hpc": {
            **SETTINGS["pools"]["hpc"],
            "values": {"slurmd": {"resources": {"limits": {"cpu": "1", "memory": "2097752Ki"}}}},
        },
    }
    limited = build_values({**LINE_12, "pools": pools}, nodes)["partitions"]["batch"]
    assert limited["configMap"]["DefMemPerCPU"] == "2048"  # 2048.59 MiB on 1 CPU, not 2049


def test_priority_tier_zero_reaches_slurm_conf() -> None:
    # The chart drops falsy values (`if $val`): an int 0 never became PriorityTier=0.
    values = build_values(
        {**LINE_12, "backfill": {**SETTINGS["backfill"], "priority_tier": 0}}, NODES
    )
    assert values["partitions"]["backfill"]["configMap"]["PriorityTier"] == "0"
    assert values["partitions"]["backfill"]["configMap"]["GraceTime"] == "60"
    site = build_values(
        {**LINE_12, "slurm_conf": {"MaxArraySize": 0, "EnforcePartLimits": False}}, NODES
    )
    assert site["controller"]["extraConfMap"]["MaxArraySize"] == "0"
    assert site["controller"]["extraConfMap"]["EnforcePartLimits"] == "NO"


@pytest.mark.parametrize(
    ("release", "values", "url"),
    [
        # The chart's slurm.fullname: the release when it holds "slurm", else <release>-slurm.
        ("slurm", {}, "http://slurm-controller.slurm.svc:6817/metrics/partitions"),
        ("hpc-slurm", {}, "http://hpc-slurm-controller.slurm.svc:6817/metrics/partitions"),
        ("prod", {}, "http://prod-slurm-controller.slurm.svc:6817/metrics/partitions"),
        (
            "prod",
            {"nameOverride": "hpc"},
            "http://prod-hpc-controller.slurm.svc:6817/metrics/partitions",
        ),
        (
            "prod",
            {"fullnameOverride": "site", "namespaceOverride": "batch"},
            "http://site-controller.batch.svc:6817/metrics/partitions",
        ),
        (
            "slurm",
            {"controller": {"service": {"port": 16817}}},
            "http://slurm-controller.slurm.svc:16817/metrics/partitions",
        ),
    ],
)
def test_metrics_url_is_where_the_operator_puts_slurmctlds_service(
    release: str, values: dict[str, t.Any], url: str
) -> None:
    assert controller_metrics_url(release, "slurm", values) == url


def test_a_bad_controller_port_is_named() -> None:
    with pytest.raises(ConfigError, match=r"slurm_cluster_values\.controller\.service\.port"):
        controller_metrics_url("slurm", "slurm", {"controller": {"service": {"port": "http"}}})


def test_each_autoscaled_nodeset_says_where_its_metrics_are() -> None:
    pools = {
        **SETTINGS["pools"],
        "hpc": {**SETTINGS["pools"]["hpc"], "autoscale": {"max_replicas": 2}},
    }
    site = {**LINE_12, "pools": pools, "values": {"controller": {"service": {"port": 7000}}}}
    (entry,) = slurm_cluster_autoscaling(site, NODES, release="hpc-slurm", namespace="hpc")
    assert entry == {
        "nodeset": "hpc",
        "name": "hpc-slurm-worker-hpc",
        "namespace": "hpc",
        "partition": "batch",
        "min_replicas": 0,
        "max_replicas": 2,
        "pending_jobs": 1,
        "metrics_url": "http://hpc-slurm-controller.hpc.svc:7000/metrics/partitions",
    }


def test_accounting_points_slurmdbd_at_its_database() -> None:
    values = build_values({**SETTINGS, "accounting": True}, NODES)
    assert values["accounting"]["enabled"] is True
    assert values["accounting"]["storageConfig"] == {
        "host": "mariadb",
        "port": 3306,
        "database": "slurm_acct_db",
        "username": "slurm",
        "passwordKeyRef": {"name": "mariadb-password", "key": "password"},
    }
    external = {
        "host": "db.hpc.example.org",
        "port": 3307,
        "password_secret": {"name": "slurmdbd-db"},
    }
    values = build_values({**SETTINGS, "accounting": True, "accounting_database": external}, NODES)
    storage = values["accounting"]["storageConfig"]
    assert storage["host"] == "db.hpc.example.org" and storage["port"] == 3307
    assert storage["passwordKeyRef"] == {"name": "slurmdbd-db", "key": "password"}
    assert "storageConfig" not in build_values(SETTINGS, NODES)["accounting"]


@pytest.mark.parametrize(
    ("database", "variable", "fix"),
    [
        ({"port": 70000}, "slurm_cluster_accounting_database.port", "give 1 to 65535"),
        (
            {"database": "acct-db"},
            "slurm_cluster_accounting_database.database",
            "letters, digits and _",
        ),
        (
            {"hostname": "db"},
            "slurm_cluster_accounting_database.hostname",
            "use some of host, port",
        ),
        ({"host": ""}, "slurm_cluster_accounting_database.host", "name the database's host"),
        (
            {"password_secret": {"name": ""}},
            "slurm_cluster_accounting_database.password_secret",
            "Secret",
        ),
    ],
)
def test_a_database_setting_that_cannot_work_is_named(
    database: dict[str, t.Any], variable: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as err:
        build_values({**SETTINGS, "accounting": True, "accounting_database": database}, NODES)
    assert err.value.variable == variable and fix in str(err.value)


HPC = SETTINGS["pools"]["hpc"]
INTERACTIVE = SETTINGS["pools"]["interactive"]
BACKFILL = SETTINGS["backfill"]
AUTOSCALED = {"min_replicas": 0, "max_replicas": 2}


# The inventories site.yml refuses in this function, each with the variable the message must
# name and a word of the fix (tests/integration/test_site_bad_inventory.py runs a few of them
# through site.yml on the Kubernetes lab, and shows that nothing changes).
@pytest.mark.parametrize(
    ("changed", "variable", "fix"),
    [
        ({"mcs": "tenant"}, "slurm_cluster_mcs", "use one of"),
        ({"mcs": "account:enforced,select"}, "slurm_cluster_mcs", "slurmdbd"),
        ({"mcs": "label", "slurm_version": "24.05"}, "slurm_cluster_mcs", "24.11"),
        (
            {"partitions": {"debug": {"pools": ["gpu-big"]}}},
            "slurm_cluster_partitions.debug.pools",
            "do not exist",
        ),
        (
            {"backfill": {**BACKFILL, "grace_time_s": -5}},
            "slurm_cluster_backfill.grace_time_s",
            ">= 0",
        ),
        (
            {"backfill": {**BACKFILL, "max_time": "UNLIMITED"}},
            "slurm_cluster_backfill.max_time",
            "finite",
        ),
        (
            # Jobs of up to 4 hours on lent nodes whose reclaim cancels them after 30 s.
            {
                "backfill": {**BACKFILL, "max_time": "4:00:00", "grace_time_s": 30},
                "handover_policy": {
                    "partitions": {"backfill": {"grace_s": 30, "escalation": "cancel"}}
                },
            },
            "slurm_cluster_backfill.max_time",
            "at most 0:01:00",
        ),
        (
            {"backfill": {**BACKFILL, "priority_tier": 10}},
            "slurm_cluster_backfill.priority_tier",
            "lower tier",
        ),
        (
            {"cgroup": {"CgroupAutomount": True}},
            "slurm_cluster_cgroup.CgroupAutomount",
            "slurmd refuses",
        ),
        ({"slurm_version": "latest"}, "slurm_cluster_slurm_version", "YY.MM"),
        (
            {"pools": {"hpc": {**HPC, "kind": "shared"}, "interactive": INTERACTIVE}},
            "slurm_cluster_pools.hpc.kind",
            "dedicated, lendable",
        ),
        (
            {
                "pools": {
                    "hpc": HPC,
                    "interactive": {**INTERACTIVE, "scaling_mode": "StatefulSet"},
                }
            },
            "slurm_cluster_pools.interactive.scaling_mode",
            "DaemonSet",
        ),
        (
            {"pools": {"hpc": {**HPC, "replicas": 5}, "interactive": INTERACTIVE}},
            "slurm_cluster_pools.hpc.replicas",
            "add nodes",
        ),
        (
            {
                "pools": {
                    "hpc": {**HPC, "scaling_mode": "DaemonSet", "autoscale": AUTOSCALED},
                    "interactive": INTERACTIVE,
                }
            },
            "slurm_cluster_pools.hpc.autoscale",
            "StatefulSet only",
        ),
        (
            {
                "pools": {
                    "hpc": {**HPC, "autoscale": {**AUTOSCALED, "max_replicas": 5}},
                    "interactive": INTERACTIVE,
                }
            },
            "slurm_cluster_pools.hpc.autoscale.max_replicas",
            "the pool has 2 nodes",
        ),
        (
            {"chart_version": "1.2.1", "nodeset_defaults": {"taintKubeNodes": True}},
            "slurm_cluster_nodeset_defaults.taintKubeNodes",
            "was removed in Slinky 1.2",
        ),
        ({"inplace_reconfigure": True}, "slurm_cluster_inplace_reconfigure", "Slinky 1.2"),
        (
            {
                "chart_version": "1.2.1",
                "mcs": "user:enforced,select",
                "pools": {
                    **SETTINGS["pools"],
                    "bridge": {"kind": "bridge", "node_selector": {"hpcops.io/pool": "bridge"}},
                },
            },
            "slurm_cluster_mcs",
            "use 'label'",
        ),
    ],
    ids=[
        "unknown-mcs-plugin",
        "mcs-account-without-accounting",
        "mcs-label-before-24.11",
        "partition-names-a-missing-pool",
        "negative-grace",
        "unlimited-backfill-time",
        "backfill-time-longer-than-a-cancelling-grace",
        "backfill-tier-not-below-batch",
        "cgroup-key-removed-from-slurm",
        "slurm-version-not-a-release",
        "unknown-pool-kind",
        "lendable-pool-as-statefulset",
        "more-replicas-than-nodes",
        "autoscale-a-daemonset-pool",
        "autoscale-beyond-the-pool",
        "taint-kube-nodes-on-1.2",
        "inplace-reconfigure-on-1.1",
        "bridge-pool-with-mcs-user",
    ],
)
def test_a_site_setting_that_cannot_work_is_named_with_its_fix(
    changed: dict[str, t.Any], variable: str, fix: str
) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        slurm_cluster_values({**SETTINGS, **changed}, [*NODES, node("br01", "bridge")])
    assert variable in str(err.value) and fix in str(err.value), str(err.value)
