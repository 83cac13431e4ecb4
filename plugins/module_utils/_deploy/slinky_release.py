# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slinky releases this collection deploys, and which versions go together (pure; no I/O).

PRIVATE: for this collection's plugins only; names and signatures may change without notice.

Slinky versions its operator, CRDs and ``slurm`` chart in lock-step (its docs/versioning.md),
so a site pins one release (``slinky_version``) and the three chart versions follow from it.
A site may still override each one; the minors must then agree, since a ``slurm`` chart of
one line renders fields the CRDs of another do not know.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ReleaseLine:
    """One minor line of Slinky, as its released charts define it."""

    minor: tuple[int, int]
    # Patch releases whose chart values this collection was checked against.
    versions: tuple[str, ...]
    # The Slurm release and OS of the line's default images (helm/slurm values.yaml).
    slurm_version: str
    image_os: str

    @property
    def name(self) -> str:
        return f"{self.minor[0]}.{self.minor[1]}"


RELEASE_LINES = {
    (1, 1): ReleaseLine((1, 1), ("1.1.0", "1.1.1", "1.1.2"), "25.11", "ubuntu24.04"),
    (1, 2): ReleaseLine((1, 2), ("1.2.0", "1.2.1", "1.2.2"), "26.05", "ubuntu26.04"),
}
# What a new site gets: the newest release of the newest line.
DEFAULT_VERSION = "1.2.2"

# The variables that carry a Slinky chart version, in install order.
VERSION_VARIABLES = (
    "slurm_operator_crds_chart_version",
    "slurm_operator_chart_version",
    "slurm_cluster_chart_version",
)


class ReleaseError(ValueError):
    """A version that cannot be deployed: the variable at fault and the fix."""

    def __init__(self, variable: str, problem: str, fix: str) -> None:
        super().__init__(f"{variable}: {problem}; {fix}")
        self.variable = variable
        self.problem = problem
        self.fix = fix


def supported_versions() -> list[str]:
    return [v for line in RELEASE_LINES.values() for v in line.versions]


def parse_version(version: t.Any, variable: str) -> tuple[int, int, int]:
    """'1.2.1' or 'v1.2.1' -> (1, 2, 1); ReleaseError otherwise."""
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)$", str(version).strip())
    if not match:
        raise ReleaseError(
            variable,
            f"{version!r} is not a Slinky release",
            f"write it as X.Y.Z, one of {', '.join(supported_versions())}",
        )
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def release_line(version: t.Any, variable: str) -> ReleaseLine:
    """The line of a supported release; ReleaseError naming the supported ones otherwise."""
    major, minor, patch = parse_version(version, variable)
    line = RELEASE_LINES.get((major, minor))
    canonical = f"{major}.{minor}.{patch}"
    if line is None or canonical not in line.versions:
        raise ReleaseError(
            variable,
            f"Slinky {canonical} is not a release this collection deploys",
            f"use one of {', '.join(supported_versions())}",
        )
    return line


def resolve(version: t.Any, variable: str = "slinky_version") -> dict[str, str]:
    """The release a site pins (empty: DEFAULT_VERSION), with its line's defaults."""
    wanted = DEFAULT_VERSION if version in (None, "") else str(version).strip().lstrip("v")
    line = release_line(wanted, variable)
    return {
        "version": wanted,
        "line": line.name,
        "slurm_version": line.slurm_version,
        "image_os": line.image_os,
    }


def version_problems(versions: Mapping[str, t.Any]) -> list[str]:
    """Why the chart versions of one site cannot be deployed together ([] when they can).

    ``versions`` maps each variable (VERSION_VARIABLES) to its value.
    """
    problems = []
    lines: dict[str, str] = {}
    for variable, version in versions.items():
        try:
            lines[variable] = release_line(version, variable).name
        except ReleaseError as err:
            problems.append(str(err))
    if len(set(lines.values())) > 1:
        found = ", ".join(f"{var} ({versions[var]})" for var in lines)
        problems.append(
            f"{found} are on different Slinky lines ({', '.join(sorted(set(lines.values())))}): "
            "the slurm chart of one line renders fields the CRDs and operator of another do not "
            "know; set slinky_version and remove the per-chart overrides, or make their X.Y agree"
        )
    return problems


def upgrade_problem(installed: t.Any, wanted: t.Any) -> str | None:
    """Why the charts do not support going from `installed` to `wanted` (None when they do).

    Slinky upgrades one minor at a time (its README's "1.Y Releases"): a patch within a
    line, or the next minor. Downgrades are not supported by its CRDs.
    """
    try:
        have = parse_version(installed, "installed Slinky release")
    except ReleaseError as err:
        return str(err)
    try:
        release_line(wanted, "slinky_version")
    except ReleaseError as err:
        return str(err)
    want = parse_version(wanted, "slinky_version")
    if want < have:
        return (
            f"slinky_version: {'.'.join(map(str, want))} is older than the installed "
            f"{'.'.join(map(str, have))}; Slinky's CRDs and stored objects do not go back: "
            "restore from backup to downgrade, or pin the installed release"
        )
    if have[:2] == want[:2]:
        return None
    if have[0] == want[0] and want[1] == have[1] + 1:
        return None
    steps = [
        line.versions[-1]
        for minor, line in sorted(RELEASE_LINES.items())
        if have[:2] < minor < want[:2]
    ]
    return (
        f"slinky_version: {'.'.join(map(str, have))} to {'.'.join(map(str, want))} skips a "
        f"minor release; the charts upgrade one minor at a time: run upgrade.yml with "
        f"slinky_version={steps[0] if steps else 'the next minor'} first"
    )


def mirrored_image(reference: t.Any, mirror: t.Any) -> str:
    """Where an upstream image (or registry prefix) lives in a site's mirror.

    The mirror keeps each image's path and drops the upstream registry host, as
    ``skopeo sync``, ``crane copy`` and registry proxy caches lay them out:
    ``docker.io/library/alpine`` -> ``<mirror>/library/alpine``,
    ``nvcr.io/nvidia/k8s`` -> ``<mirror>/nvidia/k8s``, ``quay.io`` -> ``<mirror>``.
    Without a mirror the reference is returned as it is.
    """
    ref = str(reference).strip().rstrip("/")
    site = str(mirror or "").strip().rstrip("/")
    if not site:
        return ref
    first, _slash, rest = ref.partition("/")
    if "." in first or ":" in first or first == "localhost":
        path = rest
    else:
        # No host: Docker Hub, whose official images live under library/.
        path = ref if "/" in ref else f"library/{ref}"
    return f"{site}/{path}" if path else site
