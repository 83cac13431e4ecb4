# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What upgrading a site's Slinky release changes, before anything changes (pure; no I/O).

PRIVATE: for this collection's plugins only; names and signatures may change without notice.

playbooks/upgrade.yml reads the installed Helm releases and NodeSets, builds the new values
with the deploy roles, and hands both to :func:`upgrade_report`. Helm drops every object the
new values no longer render, so a NodeSet (and with it its slurmd pods and their jobs) that
the inventory no longer names would go (slurm-operator issue 242): the report names them
and the upgrade stops unless the site says they may go.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping, Sequence

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_release import (
    ReleaseError,
    parse_version,
    upgrade_problem,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
    CHART_LINES,
    restated_slurm_conf,
    slurm_release,
)

HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"


def chart_version(chart: t.Any) -> str | None:
    """'slurm-operator-crds-1.1.0' (helm_info's status.chart) -> '1.1.0'."""
    _name, _dash, version = str(chart or "").rpartition("-")
    try:
        parse_version(version, "chart")
    except ReleaseError:
        return None
    return version


def _enabled(values: Mapping[str, t.Any], key: str) -> set[str]:
    section = values.get(key) or {}
    return {name for name, item in section.items() if (item or {}).get("enabled", True)}


def _daemonset_nodesets(values: Mapping[str, t.Any]) -> set[str]:
    """The enabled NodeSets of scalingMode DaemonSet: the lendable pools' (lent nodes)."""
    section = values.get("nodesets") or {}
    return {
        name
        for name in _enabled(values, "nodesets")
        if (section[name] or {}).get("scalingMode") == "DaemonSet"
    }


def _line(version: str) -> t.Any:
    return CHART_LINES.get(parse_version(version, "version")[:2])


def _keys_leaving(old_values: Mapping[str, t.Any], new_line: t.Any) -> list[str]:
    """NodeSet fields of the installed values the new line's chart and CRD no longer know."""
    found = []
    nodesets = sorted((old_values.get("nodesets") or {}).items())
    for key in new_line.unknown_nodeset_keys:
        names = []
        for name, nodeset in nodesets:
            node: t.Any = nodeset or {}
            for part in key.split("."):
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is not None:
                names.append(name)
        if names:
            found.append(
                f"NodeSet field {key} (set on {', '.join(names)}) is not in Slinky "
                f"{new_line.name}: the new values leave it out"
            )
    return found


def _line_changes(
    old: str, new: str, new_values: Mapping[str, t.Any], drained: list[str]
) -> list[str]:
    old_line, new_line = _line(old), _line(new)
    if old_line is None or new_line is None or old_line == new_line:
        return []
    changes = []
    if old_line.operator_writes_defaults and not new_line.operator_writes_defaults:
        conf = new_values.get("controller", {}).get("extraConfMap", {})
        cgroups = conf.get("ProctrackType") != "proctrack/linuxproc"
        restated = restated_slurm_conf(cgroups, "AccountingStorageTRES" in conf)
        changes.append(
            f"Slinky {new_line.name} no longer writes these slurm.conf settings; the collection "
            f"restates them: {', '.join(f'{k}={v}' for k, v in restated.items())}"
        )
        if "gres.conf" in new_values.get("configFiles", {}):
            changes.append(
                f"Slinky {new_line.name} no longer writes gres.conf; the collection writes "
                f"{new_values['configFiles']['gres.conf'].strip()}"
            )
    if new_line.inplace_reconfigure and not old_line.inplace_reconfigure:
        inplace = new_values.get("controller", {}).get("inplaceReconfigure", False)
        changes.append(
            f"controller.inplaceReconfigure: {str(inplace).lower()} "
            + (
                "(slurmctld reconfigures in place)"
                if inplace
                else "(a changed slurm.conf recreates the slurmctld pod; jobs keep running)"
            )
        )
    changes += _pod_replacements(new_line.name, new_values, drained)
    if old_line.chart_defaults_off and not new_line.chart_defaults_off:
        changes.append(
            f"Slinky {new_line.name}'s chart no longer enables the default NodeSet 'slinky' and "
            "partition 'all' (the collection had switched them off)"
        )
    return changes


def replaced_nodesets(old: str, new: str, new_values: Mapping[str, t.Any]) -> list[str]:
    """The StatefulSet NodeSets whose slurmd pods an operator of a new line replaces, so
    whose Slurm nodes the upgrade drains first (none within a line)."""
    old_line, new_line = _line(old), _line(new)
    if old_line is None or new_line is None or old_line == new_line:
        return []
    return sorted(_enabled(new_values, "nodesets") - _daemonset_nodesets(new_values))


def _pod_replacements(line: str, new_values: Mapping[str, t.Any], drained: list[str]) -> list[str]:
    """What a new operator line does to the running slurmd pods (measured in the lab on
    1.1.0 -> 1.2.1: once a job on a StatefulSet NodeSet ran to its end before its pod was
    replaced, once the busy pod was replaced at once while slurmctld was recreated and its
    job stayed RUNNING with no process; the DaemonSet NodeSet's pod went within seconds and
    its job was requeued)."""
    at_once = sorted(_daemonset_nodesets(new_values))
    found = []
    if drained:
        found.append(
            f"the Slinky {line} operator replaces every slurmd pod of NodeSets "
            f"{', '.join(drained)}: upgrade.yml drains their Slurm nodes first and waits for "
            "their jobs to end (slinky_upgrade_drain_timeout_s), since a busy pod replaced "
            "while slurmctld was recreated left its job RUNNING with no process; it resumes "
            "them once their new pods are up"
        )
    if at_once:
        found.append(
            f"the slurmd pods of DaemonSet NodeSets {', '.join(at_once)} (lent nodes) are replaced "
            "at once: their running jobs are requeued if they allow it (sbatch --requeue) and "
            "lost if not; reclaim.yml the lent nodes first to end them on your terms"
        )
    return found


def _persistence_warning(new_values: Mapping[str, t.Any]) -> list[str]:
    persistence = (new_values.get("controller") or {}).get("persistence") or {}
    if persistence.get("enabled", True) is False:
        return [
            "controller.persistence.enabled is false: slurmctld is recreated by the upgrade "
            "without its saved state, and every job, running or pending, is lost; enable it "
            "(a PersistentVolumeClaim) before upgrading"
        ]
    return []


def _image_changes(old_values: Mapping[str, t.Any], new_values: Mapping[str, t.Any]) -> list[str]:
    def images(values: Mapping[str, t.Any]) -> dict[str, str]:
        out = {}
        ctl = values.get("controller") or {}
        image = (ctl.get("slurmctld") or {}).get("image") or {}
        if image:
            out["slurmctld"] = f"{image.get('repository')}:{image.get('tag')}"
        for name, nodeset in (values.get("nodesets") or {}).items():
            image = ((nodeset or {}).get("slurmd") or {}).get("image") or {}
            if image and (nodeset or {}).get("enabled", True):
                out[f"NodeSet {name}"] = f"{image.get('repository')}:{image.get('tag')}"
        return out

    before, after = images(old_values), images(new_values)
    return [
        f"{what}: {before[what]} -> {after[what]} "
        + (
            "(the controller pod is recreated; jobs keep running)"
            if what == "slurmctld"
            else "(its pods are replaced by the NodeSet's update strategy)"
        )
        for what in sorted(set(before) & set(after))
        if before[what] != after[what]
    ]


# The Slurm programs in Slurm's upgrade order: slurmdbd first (it converts its database and
# still serves the older daemons), then slurmctld and slurmrestd, then slurmd and login.
SLURM_UPGRADE_ORDER: tuple[tuple[str, ...], ...] = (
    ("slurmdbd",),
    ("slurmctld", "slurmrestd"),
    ("slurmd", "login"),
)


def _image_program(image: t.Any) -> str | None:
    """'registry/slinkyproject/slurmctld:25.11-ubuntu24.04' or {repository, tag} -> 'slurmctld'."""
    if isinstance(image, Mapping):
        repository = str(image.get("repository") or "")
    elif isinstance(image, str):
        repository = image.split("@", 1)[0]
        last = repository.rsplit("/", 1)[-1]
        repository = repository[: len(repository) - len(last)] + last.split(":", 1)[0]
    else:
        return None
    return repository.rsplit("/", 1)[-1] or None


def _image_tag(image: t.Any) -> str:
    if isinstance(image, Mapping):
        return str(image.get("tag") or "")
    last = str(image or "").split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def _slurm_release(tag: str) -> tuple[int, int] | None:
    """'25.11-ubuntu24.04' -> (25, 11); None for a tag that names no Slurm release."""
    try:
        return slurm_release(tag.split("-", 1)[0], "the image tag")
    except ConfigError:
        return None


def _holding(new: t.Any, old: t.Any, programs: frozenset[str]) -> t.Any:
    """new, with every image of the named programs as old has it at the same place."""
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        out = {}
        for key, value in new.items():
            if key not in old:
                out[key] = value
            elif key == "image" and _image_program(value) in programs:
                same = _image_program(old[key]) == _image_program(value)
                out[key] = old[key] if same else value
            else:
                out[key] = _holding(value, old[key], programs)
        return out
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [_holding(item, old[index], programs) for index, item in enumerate(new)]
    return new


def slurm_release_change(
    old_values: Mapping[str, t.Any], new_values: Mapping[str, t.Any]
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """slurmdbd's Slurm release, installed and wanted, when the upgrade changes it on a
    cluster that had accounting and keeps it; None otherwise."""

    def dbd(values: Mapping[str, t.Any]) -> tuple[int, int] | None:
        accounting = values.get("accounting") or {}
        if not accounting.get("enabled") or accounting.get("external"):
            return None
        return _slurm_release(_image_tag((accounting.get("slurmdbd") or {}).get("image") or {}))

    before, after = dbd(old_values), dbd(new_values)
    if before is None or after is None or before == after:
        return None
    return before, after


def slurm_upgrade_stages(
    old_values: Mapping[str, t.Any], new_values: Mapping[str, t.Any]
) -> list[dict[str, t.Any]]:
    """The slurm chart's values of each Helm upgrade that comes before the one of
    new_values, in Slurm's order, when the upgrade changes slurmdbd's Slurm release: the
    first moves slurmdbd alone (every other Slurm image held as installed), the next
    slurmctld and slurmrestd too. A slurmctld newer than its slurmdbd is not supported, and
    one that starts while slurmdbd converts its tables cannot register. No stage otherwise."""
    if slurm_release_change(old_values, new_values) is None:
        return []
    stages: list[dict[str, t.Any]] = []
    for index, programs in enumerate(SLURM_UPGRADE_ORDER[:-1]):
        held = frozenset(p for later in SLURM_UPGRADE_ORDER[index + 1 :] for p in later)
        values = _holding(new_values, old_values, held)
        if values == new_values or (stages and values == stages[-1]["values"]):
            continue
        stages.append(
            {
                "upgrades": list(programs),
                "holds": sorted(held),
                "values": values,
                "statefulset_images": _statefulset_images(values, programs),
            }
        )
    return stages


# Where the chart's values put the image of each Slurm program the operator runs as a
# StatefulSet (its container has the program's name).
STATEFULSET_IMAGES = {
    "slurmdbd": ("accounting", "slurmdbd", "image"),
    "slurmctld": ("controller", "slurmctld", "image"),
}


def _statefulset_images(values: Mapping[str, t.Any], programs: Sequence[str]) -> dict[str, str]:
    """Each of the programs run as a StatefulSet, and the image, repository:tag, it runs."""
    images = {}
    for program in programs:
        node: t.Any = values
        for key in STATEFULSET_IMAGES.get(program, ()):
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and node.get("repository"):
            images[program] = f"{node['repository']}:{node.get('tag') or 'latest'}"
    return images


def _release_name(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]:02d}"


def upgrade_report(
    installed: Mapping[str, t.Any],
    wanted: str,
    old_values: Mapping[str, t.Any],
    new_values: Mapping[str, t.Any],
    nodesets: Sequence[Mapping[str, t.Any]],
    release: str,
    database_backup: str = "",
) -> dict[str, t.Any]:
    """What going from the installed charts to `wanted` does to this site.

    ``installed`` maps crds, operator and slurm to their installed chart version (None when
    not installed); ``old_values`` are the slurm release's values, ``new_values`` what the
    role builds now; ``nodesets`` the NodeSet objects in the cluster; ``database_backup``
    how the accounting database is saved before a Slurm release change: 'operator' (the
    mariadb component's Backup, which upgrade.yml takes), 'done' (the site dumped it) or ''.
    """
    versions = {
        part: chart_version(v) if v and "-" in str(v) else v for part, v in installed.items()
    }
    refusals = []
    slurm = versions.get("slurm")
    if not slurm:
        refusals.append(
            "no Slurm cluster release is installed: deploy it with site.yml; upgrade.yml only "
            "upgrades a running site"
        )
    for part, version in sorted(versions.items()):
        if version:
            problem = upgrade_problem(version, wanted)
            if problem:
                refusals.append(f"{part} chart {version}: {problem}")
    new_nodesets = {f"{release}-worker-{name}" for name in _enabled(new_values, "nodesets")}
    dropped_nodesets = sorted(
        obj["metadata"]["name"]
        for obj in nodesets
        if (obj.get("metadata", {}).get("annotations") or {}).get(HELM_RELEASE_ANNOTATION)
        == release
        and obj["metadata"]["name"] not in new_nodesets
    )
    dropped_partitions = sorted(
        _enabled(old_values, "partitions") - _enabled(new_values, "partitions")
    )
    slurm_change = slurm_release_change(old_values, new_values)
    stages: list[dict[str, t.Any]] = []
    before, after = (_release_name(r) for r in slurm_change) if slurm_change else ("", "")
    if slurm_change:
        if slurm_change[1] < slurm_change[0]:
            refusals.append(
                f"slurmdbd would go from Slurm {before} back to {after}: Slurm cannot go back a "
                f"release once slurmdbd converted its database; keep slurm_cluster_slurm_version "
                f"at {before} or newer"
            )
        elif database_backup not in ("operator", "done"):
            refusals.append(
                f"Slurm {before} -> {after} with accounting: slurmdbd converts its database at its "
                "first start and cannot go back, and the database is outside the collection's "
                "reach (not the mariadb component); dump it first (mariadb-dump "
                "--single-transaction <database>) and run again with "
                "-e slinky_upgrade_database_backed_up=true"
            )
    changes: list[str] = []
    # Drained before the upgrade and resumed after (upgrade.yml).
    drain = replaced_nodesets(slurm, wanted, new_values) if slurm and not refusals else []
    if slurm and not refusals:
        changes += _keys_leaving(old_values, _line(wanted))
        changes += _line_changes(slurm, wanted, new_values, drain)
        if slurm != wanted:
            changes += _persistence_warning(new_values)
        changes += _image_changes(old_values, new_values)
        if slurm_change:
            stages = slurm_upgrade_stages(old_values, new_values)
            backup = (
                "the mariadb-operator backs the database up first"
                if database_backup == "operator"
                else "the site backed the database up"
            )
            changes.append(
                f"Slurm {before} -> {after} with accounting, in Slurm's order: "
                + ", then ".join(" and ".join(programs) for programs in SLURM_UPGRADE_ORDER)
                + f"; {backup}, and slurmdbd converts its tables at its first start"
            )
    changes += [
        f"NodeSet {name} exists in the cluster but not in the inventory: Helm would delete it, "
        "its slurmd pods and their jobs"
        for name in dropped_nodesets
    ]
    changes += [
        f"partition {name} is in the installed values but not in the inventory: Slurm would "
        "lose it and its pending jobs"
        for name in dropped_partitions
    ]
    return {
        "installed": versions,
        "wanted": wanted,
        "same_version": bool(slurm) and all(v in (None, wanted) for v in versions.values()),
        "refusals": refusals,
        "changes": changes,
        "dropped_nodesets": dropped_nodesets,
        "dropped_partitions": dropped_partitions,
        "drain_nodesets": drain,
        "slurm_release": ({"installed": before, "wanted": after} if slurm_change else None),
        "slurm_stages": stages,
    }
