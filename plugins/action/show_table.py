# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action of hpcops.slinky.show_table: the table's lines on the terminal, through Display."""

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "lines": {"type": "list", "elements": "str", "required": True},
    "title": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no types
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result: dict[str, t.Any] = super().run(tmp, task_vars)
        # Fails the task with the option's name on bad input (AnsibleActionFail).
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        lines = ([args["title"]] if args["title"] else []) + list(args["lines"])
        # Standard error: a JSON stdout callback's output must stay one JSON document.
        display.display("\n".join(lines), stderr=True)
        result.update(changed=False, lines=lines)
        return result
