# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a role's Helm chart comes from: one variable, three forms (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

* ``{oci: oci://registry/path/chart}``: an OCI registry (mirrors included);
* ``{repo: https://charts.example.org, name: chart}``: a classic Helm repository;
* ``{path: /srv/mirror/chart-1.2.3.tgz}``: a packaged chart or chart folder on the controller.

:func:`chart_args` turns it into the arguments of ``kubernetes.core.helm``.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping

FORMS = ("oci", "repo", "path")


class ChartSourceError(ValueError):
    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(
            f"{variable}: {problem}; give exactly one of "
            "{oci: oci://<registry>/<path>/<chart>}, {repo: <https URL>, name: <chart>} "
            "or {path: <packaged .tgz or folder on the controller>}"
        )
        self.variable = variable


def chart_args(source: t.Any, version: t.Any, variable: str) -> dict[str, t.Any]:
    """chart_ref, chart_repo_url and chart_version for kubernetes.core.helm."""
    if not isinstance(source, Mapping):
        raise ChartSourceError(variable, f"expected a mapping, got {type(source).__name__}")
    given = [form for form in FORMS if source.get(form)]
    unknown = sorted(set(source) - {*FORMS, "name"})
    if unknown:
        raise ChartSourceError(variable, f"unknown keys {unknown}")
    if len(given) != 1:
        raise ChartSourceError(variable, f"found {given or 'none'} of oci, repo, path")
    form = given[0]
    if form != "path" and not version:
        raise ChartSourceError(
            f"{variable.removesuffix('_chart')}_chart_version", "is empty; pin the chart version"
        )
    if form == "oci":
        ref = str(source["oci"])
        if not ref.startswith("oci://") or ref.rstrip("/") == "oci:":
            raise ChartSourceError(variable, f"oci {ref!r} does not start with oci://")
        return {"chart_ref": ref, "chart_repo_url": None, "chart_version": str(version)}
    if form == "repo":
        url = str(source["repo"])
        if not url.startswith(("https://", "http://", "file://")):
            raise ChartSourceError(variable, f"repo {url!r} is not an http(s) or file URL")
        if not source.get("name"):
            raise ChartSourceError(variable, "repo needs the chart's name")
        return {
            "chart_ref": str(source["name"]),
            "chart_repo_url": url,
            "chart_version": str(version),
        }
    if source.get("name"):
        raise ChartSourceError(variable, "name goes with repo only")
    # A packaged chart carries its own version; the pin still documents what was mirrored.
    return {"chart_ref": str(source["path"]), "chart_repo_url": None, "chart_version": None}
