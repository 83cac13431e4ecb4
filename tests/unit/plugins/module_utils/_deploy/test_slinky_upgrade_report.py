# SPDX-License-Identifier: GPL-3.0-or-later
"""What upgrade.yml's preflight says an upgrade does to running slurmd pods and jobs."""

from __future__ import annotations

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_upgrade import (
    slurm_upgrade_stages,
    upgrade_report,
)

INSTALLED = {"crds": "1.1.0", "operator": "1.1.0", "slurm": "slurm-1.1.0"}


def values(**controller: t.Any) -> dict[str, t.Any]:
    return {
        "controller": controller,
        "nodesets": {
            "hpc": {"scalingMode": "StatefulSet"},
            "interactive": {"scalingMode": "DaemonSet"},
            "old": {"scalingMode": "StatefulSet", "enabled": False},
        },
    }


def report(wanted: str, new_values: dict[str, t.Any], installed: t.Any = None) -> dict[str, t.Any]:
    return upgrade_report(installed or INSTALLED, wanted, values(), new_values, [], "slurm")


def changes(wanted: str, new_values: dict[str, t.Any], installed: t.Any = None) -> str:
    return "\n".join(report(wanted, new_values, installed)["changes"])


def test_a_new_operator_line_says_which_slurmd_pods_it_replaces_and_how() -> None:
    found = changes("1.2.1", values())
    assert "the Slinky 1.2 operator replaces every slurmd pod of NodeSets hpc: " in found
    assert "upgrade.yml drains their Slurm nodes first and waits for their jobs" in found
    assert "DaemonSet NodeSets interactive (lent nodes) are replaced at once" in found
    assert "requeued if they allow it (sbatch --requeue) and lost if not" in found
    # A disabled NodeSet has no pods: "NodeSets hpc:" above, not "hpc, old".


def test_a_patch_release_replaces_no_pods() -> None:
    installed = {"crds": "1.2.0", "operator": "1.2.0", "slurm": "slurm-1.2.0"}
    assert "replaces every slurmd pod" not in changes("1.2.1", values(), installed)
    assert report("1.2.1", values(), installed)["drain_nodesets"] == []


def test_only_the_dedicated_nodesets_of_a_new_line_are_drained_first() -> None:
    # The DaemonSet NodeSet's pods (lent nodes) go at once and the disabled one has none.
    assert report("1.2.1", values())["drain_nodesets"] == ["hpc"]
    # Nothing is drained for an upgrade that is refused (a skipped minor).
    installed = {"crds": "1.0.0", "operator": "1.0.0", "slurm": "slurm-1.0.0"}
    refused = report("1.2.1", values(), installed)
    assert refused["refusals"] and refused["drain_nodesets"] == []


def test_an_upgrade_without_slurmctld_persistence_warns_that_every_job_is_lost() -> None:
    warning = "controller.persistence.enabled is false: slurmctld is recreated"
    assert warning in changes("1.2.1", values(persistence={"enabled": False}))
    assert warning not in changes("1.2.1", values(persistence={"enabled": True}))
    assert warning not in changes("1.2.1", values())  # the chart's default: on
    installed = {"crds": "1.2.1", "operator": "1.2.1", "slurm": "slurm-1.2.1"}
    assert warning not in changes("1.2.1", values(persistence={"enabled": False}), installed)


def slurm_values(release: str, *, accounting: bool = True) -> dict[str, t.Any]:
    """The slurm chart's values as the role builds them, Slurm `release`'s images."""

    def image(program: str) -> dict[str, str]:
        return {"repository": f"mirror/slinkyproject/{program}", "tag": f"{release}-ubuntu24.04"}

    return {
        "accounting": {"enabled": accounting, "slurmdbd": {"image": image("slurmdbd")}},
        "controller": {
            "slurmctld": {"image": image("slurmctld")},
            "reconfigure": {"image": image("slurmctld")},
            "initContainers": [
                {
                    "name": "wait-for-slurmdbd",
                    "image": f"mirror/slinkyproject/slurmctld:{release}-x",
                }
            ],
            "logfile": {"image": {"repository": "mirror/library/alpine", "tag": "3.22"}},
        },
        "restapi": {"slurmrestd": {"image": image("slurmrestd")}},
        "nodesets": {"hpc": {"slurmd": {"image": image("slurmd")}}},
        "loginsets": {"login": {"login": {"image": image("login")}}},
    }


def images(values: dict[str, t.Any]) -> dict[str, str]:
    """Each Slurm image of the values, by where it is."""
    return {
        "slurmdbd": values["accounting"]["slurmdbd"]["image"]["tag"],
        "slurmctld": values["controller"]["slurmctld"]["image"]["tag"],
        "reconfigure": values["controller"]["reconfigure"]["image"]["tag"],
        "init": values["controller"]["initContainers"][0]["image"],
        "slurmrestd": values["restapi"]["slurmrestd"]["image"]["tag"],
        "slurmd": values["nodesets"]["hpc"]["slurmd"]["image"]["tag"],
        "login": values["loginsets"]["login"]["login"]["image"]["tag"],
    }


def test_a_slurm_release_change_with_accounting_goes_in_slurms_order() -> None:
    old, new = slurm_values("25.11"), slurm_values("26.05")
    first, second = slurm_upgrade_stages(old, new)
    assert first["upgrades"] == ["slurmdbd"]
    assert images(first["values"]) == {
        "slurmdbd": "26.05-ubuntu24.04",
        "slurmctld": "25.11-ubuntu24.04",
        "reconfigure": "25.11-ubuntu24.04",
        "init": "mirror/slinkyproject/slurmctld:25.11-x",
        "slurmrestd": "25.11-ubuntu24.04",
        "slurmd": "25.11-ubuntu24.04",
        "login": "25.11-ubuntu24.04",
    }
    assert first["statefulset_images"] == {
        "slurmdbd": "mirror/slinkyproject/slurmdbd:26.05-ubuntu24.04"
    }
    assert second["upgrades"] == ["slurmctld", "slurmrestd"]
    assert images(second["values"]) == {
        **images(new),
        "slurmd": "25.11-ubuntu24.04",
        "login": "25.11-ubuntu24.04",
    }
    assert second["statefulset_images"] == {
        "slurmctld": "mirror/slinkyproject/slurmctld:26.05-ubuntu24.04"
    }
    # Everything but the images is the new values' in every stage.
    assert first["values"]["controller"]["logfile"] == new["controller"]["logfile"]


def test_no_stages_without_a_slurm_release_change_of_slurmdbd() -> None:
    assert slurm_upgrade_stages(slurm_values("26.05"), slurm_values("26.05")) == []
    # Another OS of the same release: the pods are replaced, in one go.
    moved = slurm_values("26.05")
    moved["accounting"]["slurmdbd"]["image"]["tag"] = "26.05-ubuntu26.04"
    assert slurm_upgrade_stages(slurm_values("26.05"), moved) == []
    # Accounting off, or being switched on: no slurmdbd to go first.
    off_before = slurm_values("25.11", accounting=False)
    assert slurm_upgrade_stages(off_before, slurm_values("26.05")) == []
    off = slurm_values("26.05", accounting=False)
    assert slurm_upgrade_stages(slurm_values("25.11", accounting=False), off) == []


def slurm_report(old: dict[str, t.Any], new: dict[str, t.Any], backup: str) -> dict[str, t.Any]:
    installed = {"crds": "1.2.0", "operator": "1.2.0", "slurm": "slurm-1.2.0"}
    return upgrade_report(installed, "1.2.1", old, new, [], "slurm", backup)


def test_a_slurm_release_change_is_refused_until_the_database_is_backed_up() -> None:
    old, new = slurm_values("25.11"), slurm_values("26.05")
    refused = slurm_report(old, new, "")
    assert refused["refusals"] == [
        "Slurm 25.11 -> 26.05 with accounting: slurmdbd converts its database at its first "
        "start and cannot go back, and the database is outside the collection's reach (not "
        "the mariadb component); dump it first (mariadb-dump --single-transaction "
        "<database>) and run again with -e slinky_upgrade_database_backed_up=true"
    ]
    assert refused["slurm_stages"] == []
    for backup in ("operator", "done"):
        report_ = slurm_report(old, new, backup)
        assert report_["refusals"] == []
        assert report_["slurm_release"] == {"installed": "25.11", "wanted": "26.05"}
        assert [s["upgrades"] for s in report_["slurm_stages"]] == [
            ["slurmdbd"],
            ["slurmctld", "slurmrestd"],
        ]
    found = "\n".join(slurm_report(old, new, "operator")["changes"])
    assert (
        "Slurm 25.11 -> 26.05 with accounting, in Slurm's order: slurmdbd, then slurmctld and "
        "slurmrestd, then slurmd and login; the mariadb-operator backs the database up first"
    ) in found


def test_slurmdbd_never_goes_back_a_release() -> None:
    refused = slurm_report(slurm_values("26.05"), slurm_values("25.11"), "operator")
    assert refused["refusals"] == [
        "slurmdbd would go from Slurm 26.05 back to 25.11: Slurm cannot go back a release "
        "once slurmdbd converted its database; keep slurm_cluster_slurm_version at 26.05 or "
        "newer"
    ]
