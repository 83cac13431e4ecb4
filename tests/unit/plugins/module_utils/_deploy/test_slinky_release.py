# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slinky releases the collection deploys, which chart versions go together, upgrades."""

from __future__ import annotations

import re

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slinky_release import (
    DEFAULT_VERSION,
    RELEASE_LINES,
    ReleaseError,
    mirrored_image,
    resolve,
    upgrade_problem,
    version_problems,
)


def test_a_new_site_gets_the_newest_release_of_the_newest_line() -> None:
    newest = RELEASE_LINES[max(RELEASE_LINES)].versions[-1]
    assert newest == DEFAULT_VERSION
    assert resolve(None)["version"] == resolve("")["version"] == newest
    assert resolve("v1.1.0") == {
        "version": "1.1.0",
        "line": "1.1",
        "slurm_version": "25.11",
        "image_os": "ubuntu24.04",
    }
    assert resolve("1.2.1")["slurm_version"] == "26.05"


@pytest.mark.parametrize("version", ["1.0.5", "1.3.0", "1.2.7", "1.2", "stable"])
def test_unsupported_releases_name_the_variable_and_the_supported_ones(version: str) -> None:
    with pytest.raises(ReleaseError, match=r"^slinky_version: .*one of 1\.1\.0, .*1\.2\.2"):
        resolve(version)


def test_chart_versions_of_one_line_go_together() -> None:
    assert not version_problems(
        {
            "slurm_operator_crds_chart_version": "1.2.1",
            "slurm_operator_chart_version": "1.2.2",
            "slurm_cluster_chart_version": "1.2.0",
        }
    )
    (problem,) = version_problems(
        {
            "slurm_operator_crds_chart_version": "1.1.2",
            "slurm_operator_chart_version": "1.1.2",
            "slurm_cluster_chart_version": "1.2.1",
        }
    )
    assert "slurm_operator_crds_chart_version (1.1.2)" in problem
    assert "slurm_cluster_chart_version (1.2.1)" in problem
    assert "different Slinky lines (1.1, 1.2)" in problem
    (problem,) = version_problems({"slurm_operator_chart_version": "0.4.1"})
    assert problem.startswith("slurm_operator_chart_version: Slinky 0.4.1 is not a release")


@pytest.mark.parametrize(
    ("installed", "wanted", "refusal"),
    [
        ("1.1.0", "1.1.2", None),
        ("1.1.2", "1.2.2", None),
        ("1.0.5", "1.1.2", None),
        ("1.2.2", "1.2.2", None),
        ("1.2.1", "1.1.2", "older than the installed 1.2.1"),
        ("1.0.5", "1.2.2", "skips a minor release.*slinky_version=1.1.2 first"),
        ("1.1.0", "1.3.0", "not a release this collection deploys"),
    ],
)
def test_upgrades_go_one_minor_at_a_time(installed: str, wanted: str, refusal: str | None) -> None:
    problem = upgrade_problem(installed, wanted)
    if refusal is None:
        assert problem is None
    else:
        assert problem is not None
        assert re.search(refusal, problem), problem


@pytest.mark.parametrize(
    ("upstream", "mirror", "expected"),
    [
        ("docker.io/library/alpine", "registry.site", "registry.site/library/alpine"),
        ("alpine", "registry.site/", "registry.site/library/alpine"),
        ("nvidia/driver", "registry.site", "registry.site/nvidia/driver"),
        ("nvcr.io/nvidia/k8s", "registry.site:5000/mirror", "registry.site:5000/mirror/nvidia/k8s"),
        (
            "registry.k8s.io/nfd/node-feature-discovery",
            "r.site",
            "r.site/nfd/node-feature-discovery",
        ),
        ("quay.io", "registry.site", "registry.site"),
        ("localhost/x/y", "registry.site", "registry.site/x/y"),
        ("ghcr.io/slinkyproject", "", "ghcr.io/slinkyproject"),
        ("ghcr.io/slinkyproject", None, "ghcr.io/slinkyproject"),
    ],
)
def test_mirrored_image_keeps_the_path_and_drops_the_host(
    upstream: str, mirror: str | None, expected: str
) -> None:
    assert mirrored_image(upstream, mirror) == expected
