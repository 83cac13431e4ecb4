# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: set options of containerd's CRI plugin in config.toml, changing nothing else.

Why not a drop-in in `imports`: containerd 1.x replaces a whole plugin section with the
imported file's, so a drop-in that sets SystemdCgroup would drop every other CRI setting of
the main file (sandbox image, registry mirrors). The edit is line-based, so comments and
order stay; it runs on the node host (standard library only). Pure.
"""

from __future__ import annotations

import re
import typing as t

# Where each option lives, below the CRI plugin's table.
_OPTION_TABLES = {
    "SystemdCgroup": "containerd.runtimes.runc.options",
    "enable_cdi": "",
}
# The CRI plugin's id by config version: 2 is containerd 1.x, 3 is containerd 2.x.
_CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


class ContainerdConfigError(ValueError):
    """The file cannot be edited safely; the message says why and what to do."""


def config_version(text: str) -> int:
    match = re.search(r"(?m)^\s*version\s*=\s*(\d+)\s*$", text)
    return int(match.group(1)) if match else 1


def _table_name(line: str) -> str | None:
    """The table a `[header]` line opens, quotes normalised; None for other lines."""
    stripped = line.split("#", 1)[0].strip()
    if stripped.startswith("[") and not stripped.startswith("[[") and stripped.endswith("]"):
        return stripped[1:-1].strip().replace("'", '"').replace(" ", "")
    return None


def _toml_value(value: t.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_cri_options(text: str, options: dict[str, t.Any]) -> str:
    """`text` with each option set (replaced in its table, or added to it, or a new table)."""
    version = config_version(text)
    if version not in _CRI_PLUGIN:
        has_plugins = re.search(r"(?m)^\s*\[plugins", text)
        if version == 1 and not has_plugins:
            # An empty or comment-only file: declaring version 2 changes no setting.
            text = "version = 2\n" + text
            version = 2
        else:
            raise ContainerdConfigError(
                f"config version {version} is not one node_prep edits: migrate the file to "
                "version 2 or 3 with `containerd config migrate` first"
            )
    plugin = _CRI_PLUGIN[version]
    lines = text.splitlines()
    for key, value in options.items():
        suffix = _OPTION_TABLES[key]
        table = f'plugins."{plugin}"' + (f".{suffix}" if suffix else "")
        lines = _set_in_table(lines, table, key, _toml_value(value))
    return "\n".join(lines) + "\n"


def _set_in_table(lines: list[str], table: str, key: str, value: str) -> list[str]:
    start = next((i for i, line in enumerate(lines) if _table_name(line) == table), None)
    if start is None:
        return [*lines, "", f"[{table}]", f"  {key} = {value}"]
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if _table_name(lines[i]) is not None or lines[i].lstrip().startswith("[[")
        ),
        len(lines),
    )
    pattern = re.compile(rf"^(\s*){re.escape(key)}\s*=\s*[^#]*?(\s*#.*)?$")
    for index in range(start + 1, end):
        match = pattern.match(lines[index])
        if match:
            lines = list(lines)
            lines[index] = f"{match.group(1)}{key} = {value}{match.group(2) or ''}"
            return lines
    indent = re.match(r"^(\s*)", lines[start]).group(1) + "  "  # type: ignore[union-attr]
    return [*lines[: start + 1], f"{indent}{key} = {value}", *lines[start + 1 :]]
