# SPDX-License-Identifier: GPL-3.0-or-later
"""Every image the stack runs comes from the site's mirror when slinky_image_mirror is set.

The charts this machine can build (Slinky's from the operator module, cert-manager's from
its module) are rendered by the real helm with the values the roles build for
inventories/example, and every image in every rendered object, custom resources included,
must be in the mirror. The GPU operator's and KEDA's charts cannot be fetched here: their
values must set every image key their charts' values.yaml has (listed below from the
versions the roles pin), each into the mirror.
"""

from __future__ import annotations

import subprocess
import tempfile
import typing as t
from collections.abc import Iterator
from pathlib import Path

import k8s_binaries
import pytest
import yaml
from test_role_values_golden import build

pytestmark = pytest.mark.integration

MIRROR = "registry.hpc.example.org"
# The release the lab can package; the values of the 1.2 line are checked in the golden files.
LAB_LINE = {"slinky_version": k8s_binaries.LAB_SLINKY_VERSION.lstrip("v")}

# gpu-operator v26.7.0 deployments/gpu-operator/values.yaml: every component with a
# `repository`, and node-feature-discovery 0.19.0's image.repository (vgpuManager has none:
# a site builds it; kataManager pulls no image by default).
GPU_OPERATOR_IMAGE_KEYS = (
    "operator",
    "validator",
    "driver",
    "driver.manager",
    "toolkit",
    "devicePlugin",
    "dcgm",
    "dcgmExporter",
    "gfd",
    "migManager",
    "nodeStatusExporter",
    "gds",
    "gdrcopy",
    "vgpuManager.driverManager",
    "vgpuDeviceManager",
    "vfioManager",
    "vfioManager.driverManager",
    "sandboxDevicePlugin",
    "kataSandboxDevicePlugin",
    "ccManager",
    "draDriver",
    "node-feature-discovery.image",
)
# keda 2.20.2 values.yaml: image.{keda,metricsApiServer,webhooks}.registry.
KEDA_IMAGE_KEYS = ("image.keda", "image.metricsApiServer", "image.webhooks")


def images(obj: t.Any) -> Iterator[str]:
    """Every `image: <string>` in a rendered object (pods, templates and custom resources)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from images(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from images(item)


def render(chart: Path, values: dict[str, t.Any], namespace: str) -> list[str]:
    helm = str(k8s_binaries.ensure(["helm"])["helm"])
    with tempfile.TemporaryDirectory(prefix="hpcops-render-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        proc = subprocess.run(
            [helm, "template", "release", str(chart), "-n", namespace, "-f", str(values_file)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    found = [image for doc in yaml.safe_load_all(proc.stdout) for image in images(doc)]
    assert found, f"{chart.name} rendered no image at all"
    return found


@pytest.fixture(scope="module")
def lab_line_values() -> dict[str, t.Any]:
    return build(LAB_LINE)


@pytest.mark.parametrize(
    ("chart", "role", "namespace"),
    [
        ("slurm", "slurm_cluster", "slurm"),
        ("slurm-operator", "slurm_operator", "slinky"),
        ("cert-manager", "cert_manager", "cert-manager"),
    ],
)
def test_rendered_charts_pull_only_from_the_mirror(
    lab_line_values: dict[str, t.Any], chart: str, role: str, namespace: str
) -> None:
    path = (
        k8s_binaries.cert_manager_chart()
        if chart == "cert-manager"
        else k8s_binaries.slinky_charts()[chart]
    )
    rendered = render(path, lab_line_values[role], namespace)
    outside = sorted({image for image in rendered if not image.startswith(f"{MIRROR}/")})
    assert not outside, f"{chart} pulls {outside} from outside {MIRROR}"


def test_slurm_chart_keeps_a_priority_tier_of_zero(lab_line_values: dict[str, t.Any]) -> None:
    # The chart drops falsy values; the role hands them over as strings.
    values = lab_line_values["slurm_cluster"]
    values["partitions"]["backfill"]["configMap"]["PriorityTier"] = "0"
    helm = str(k8s_binaries.ensure(["helm"])["helm"])
    with tempfile.TemporaryDirectory(prefix="hpcops-render-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        out = subprocess.run(
            [
                helm,
                "template",
                "slurm",
                str(k8s_binaries.slinky_charts()["slurm"]),
                "-f",
                str(values_file),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    (line,) = [ln for ln in out.splitlines() if "PartitionName=backfill" in ln]
    assert "PriorityTier=0" in line, line


def lookup(values: dict[str, t.Any], dotted: str) -> t.Any:
    for part in dotted.split("."):
        values = values[part]
    return values


@pytest.mark.parametrize(
    ("role", "keys", "field"),
    [
        ("gpu_operator", GPU_OPERATOR_IMAGE_KEYS, "repository"),
        ("keda", KEDA_IMAGE_KEYS, "registry"),
    ],
)
def test_charts_not_renderable_here_set_every_image_into_the_mirror(
    lab_line_values: dict[str, t.Any], role: str, keys: tuple[str, ...], field: str
) -> None:
    values = lab_line_values[role]
    outside = {
        key: lookup(values, key).get(field)
        for key in keys
        if not str(lookup(values, key).get(field, "")).startswith(MIRROR)
    }
    assert not outside, f"{role} leaves {outside} outside {MIRROR}"
