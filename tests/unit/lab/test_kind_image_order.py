# SPDX-License-Identifier: GPL-3.0-or-later
"""In which order tests/lab/kind_images.py builds the kind scenarios' images: those whose Go
binaries are built (or that need none) before one that would wait for a compile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
import k8s_binaries
from kind_images import Image, binary_inputs, next_to_build


def image(key: str, *binaries: str) -> Image:
    inputs = binary_inputs(*binaries) if binaries else (lambda: f"root of {key}")
    return Image(key, f"hpcops.local/test/{key}:1", lambda _root: None, inputs)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(k8s_binaries, "BIN_DIR", tmp_path)
    return tmp_path


def built(bin_dir: Path, name: str) -> None:
    (bin_dir / k8s_binaries.binary(name).path.name).write_bytes(b"")


def test_an_image_of_a_root_goes_before_one_waiting_for_its_binary(bin_dir: Path) -> None:
    keda, slurmd = image("keda", "keda-operator"), image("slurmd")
    assert next_to_build([keda, slurmd]) is slurmd


def test_an_image_whose_binaries_are_built_goes_first(bin_dir: Path) -> None:
    keda = image("keda", "keda-operator")
    metallb = image("metallb", "metallb-controller", "metallb-speaker")
    built(bin_dir, "metallb-controller")
    assert next_to_build([keda, metallb]) is keda  # one of metallb's two is still missing
    built(bin_dir, "metallb-speaker")
    assert next_to_build([keda, metallb]) is metallb


def test_with_nothing_ready_the_order_is_kept(bin_dir: Path) -> None:
    first, second = image("keda", "keda-operator"), image("metallb", "metallb-controller")
    assert next_to_build([first, second]) is first


def test_the_recipe_still_names_the_binaries_files(bin_dir: Path) -> None:
    inputs = binary_inputs("keda-operator", "kubectl")
    assert inputs() == " ".join(
        str(bin_dir / k8s_binaries.binary(name).path.name) for name in ("keda-operator", "kubectl")
    )
