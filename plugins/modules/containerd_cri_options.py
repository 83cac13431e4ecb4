#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: containerd_cri_options
short_description: Set the cgroup driver and CDI of containerd's CRI plugin in config.toml
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Sets C(SystemdCgroup) of the runc runtime and C(enable_cdi) of the CRI plugin in
    containerd's configuration file, for config version 2 (containerd 1.x) and 3
    (containerd 2.x), leaving every other line, comment and setting as it was.
  - Edits the main file rather than adding a drop-in, because containerd 1.x replaces a
    whole plugin section with an imported file's and would lose the file's other CRI settings.
  - An empty file is declared version 2 first; a version 1 file with plugin settings is
    refused (migrate it with C(containerd config migrate)).
  - containerd reads the file when it starts; restart it (and the kubelet, when the cgroup
    driver changes) after a change.
options:
  path:
    description: The configuration file.
    type: path
    default: /etc/containerd/config.toml
  systemd_cgroup:
    description: C(SystemdCgroup) of the runc runtime; unset leaves it.
    type: bool
  enable_cdi:
    description: C(enable_cdi) of the CRI plugin (containerd 1.7 or newer); unset leaves it.
    type: bool
  backup:
    description: Keep a copy of the file as it was, with a time stamp in its name.
    type: bool
    default: false
extends_documentation_fragment:
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: The systemd cgroup driver and CDI
  hpcops.slinky.containerd_cri_options:
    systemd_cgroup: true
    enable_cdi: true
  become: true
  notify: Restart containerd
"""

RETURN = r"""
version:
  description: The file's config version after the change.
  returned: success
  type: int
  sample: 2
backup_file:
  description: The copy of the file as it was, when O(backup) made one.
  returned: changed and O(backup)
  type: str
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpcops.slinky.plugins.module_utils._preflight.containerd_config import (
    ContainerdConfigError,
    config_version,
    set_cri_options,
)

try:
    import tomllib

    HAS_TOMLLIB = True
except ImportError:  # Python < 3.11 on the host: the edit is not parsed back
    HAS_TOMLLIB = False


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/containerd/config.toml"},
            "systemd_cgroup": {"type": "bool"},
            "enable_cdi": {"type": "bool"},
            "backup": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    options = {
        key: module.params[name]
        for key, name in (("SystemdCgroup", "systemd_cgroup"), ("enable_cdi", "enable_cdi"))
        if module.params[name] is not None
    }
    before = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    try:
        after = set_cri_options(before, options)
    except ContainerdConfigError as err:
        module.fail_json(msg=f"{path}: {err}")
    if HAS_TOMLLIB:
        try:
            tomllib.loads(after)
        except tomllib.TOMLDecodeError as err:
            module.fail_json(msg=f"{path}: the edited file would not parse ({err}); left as it was")
    changed = after != before
    result: dict[str, t.Any] = {"changed": changed, "version": config_version(after)}
    if module._diff:
        result["diff"] = {
            "before": before,
            "after": after,
            "before_header": path,
            "after_header": path,
        }
    if changed and not module.check_mode:
        if module.params["backup"] and before:
            result["backup_file"] = module.backup_local(path)
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        temp = os.path.join(directory, f".{os.path.basename(path)}.hpcops-tmp")
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(after)
        module.atomic_move(temp, path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
