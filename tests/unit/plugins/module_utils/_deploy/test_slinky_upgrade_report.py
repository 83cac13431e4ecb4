# SPDX-License-Identifier: GPL-3.0-or-later
"""What upgrade.yml's preflight says an upgrade does to running slurmd pods and jobs."""

from __future__ import annotations

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_upgrade import (
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
