# SPDX-License-Identifier: GPL-3.0-or-later
"""containerd_cri_options' edit: only the options change, in their tables, in both config
versions; the result parses and means what was asked."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._preflight.containerd_config import (
    ContainerdConfigError,
    set_cri_options,
)
from ansible_collections.hpcops.slinky.plugins.plugin_utils._preflight.checks import containerd_runc

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures/preflight"
DEBIAN = (FIXTURES / "containerd-1.6.20-debian-config.toml").read_text()
DUMP = (FIXTURES / "containerd-1.6.20-dump.toml").read_text()


def effective(text: str) -> dict[str, object]:
    return containerd_runc({"containerd": {"config": text}})


@pytest.mark.parametrize("text", [DEBIAN, DUMP], ids=["debian-package-file", "full-dump"])
def test_systemd_cgroup_and_cdi_are_set_and_nothing_else_changes(text: str) -> None:
    edited = set_cri_options(text, {"SystemdCgroup": True, "enable_cdi": True})
    assert effective(edited)["systemd_cgroup"] is True
    assert effective(edited)["enable_cdi"] is True
    before, after = tomllib.loads(text), tomllib.loads(edited)
    cri_before = before["plugins"]["io.containerd.grpc.v1.cri"]
    cri_after = after["plugins"]["io.containerd.grpc.v1.cri"]
    assert {k: v for k, v in cri_after.items() if k not in ("containerd", "enable_cdi")} == {
        k: v for k, v in cri_before.items() if k not in ("containerd", "enable_cdi")
    }
    assert set_cri_options(edited, {"SystemdCgroup": True, "enable_cdi": True}) == edited


def test_an_existing_value_is_replaced_in_place_with_its_comment() -> None:
    text = DUMP.replace("SystemdCgroup = false", "SystemdCgroup = false  # kind")
    edited = set_cri_options(text, {"SystemdCgroup": True})
    assert "            SystemdCgroup = true  # kind" in edited.splitlines()
    assert len(edited.splitlines()) == len(text.splitlines())


def test_containerd_2_uses_its_own_plugin_id() -> None:
    edited = set_cri_options("version = 3\n", {"SystemdCgroup": True})
    assert '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]' in edited
    assert effective(edited)["systemd_cgroup"] is True


def test_an_empty_file_becomes_version_2() -> None:
    edited = set_cri_options("# see containerd-config.toml(5)\n", {"SystemdCgroup": True})
    assert edited.startswith("version = 2\n")
    assert effective(edited)["systemd_cgroup"] is True


def test_a_version_1_file_with_plugins_is_refused() -> None:
    with pytest.raises(ContainerdConfigError, match="containerd config migrate"):
        set_cri_options('[plugins.cri]\n  sandbox_image = "pause"\n', {"SystemdCgroup": True})
