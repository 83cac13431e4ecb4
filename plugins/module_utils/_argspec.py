# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A module's options and the rules between them, put together from the backends' parts.

PRIVATE to the collection: names here can change without notice.

Each backend offers its options as an :class:`ArgumentSpec` beside the code that reads them
(``_slurm.module.slurmrestd_argspec``, ``_k8s.client.kubernetes_argspec``,
``_handover.options.handover_argspec``); a module merges the ones it needs, adds its own
options and builds its AnsibleModule (the pattern of community.crypto's ``_argspec``)::

    module = (
        slurmrestd_argspec()
        .update_argspec(names={"type": "list", "elements": "str", "required": True})
        .create_ansible_module(supports_check_mode=True)
    )
"""

from __future__ import annotations

import typing as t

from ansible.module_utils.basic import AnsibleModule

Options = dict[str, dict[str, t.Any]]
_RULES = ("mutually_exclusive", "required_together", "required_one_of", "required_if")


class ArgumentSpec:
    """Options (an argument_spec) and the rules between them, merged part by part."""

    def __init__(
        self,
        argument_spec: Options | None = None,
        *,
        mutually_exclusive: t.Sequence[t.Sequence[str]] | None = None,
        required_together: t.Sequence[t.Sequence[str]] | None = None,
        required_one_of: t.Sequence[t.Sequence[str]] | None = None,
        required_if: t.Sequence[t.Sequence[t.Any]] | None = None,
        required_by: dict[str, t.Sequence[str]] | None = None,
    ) -> None:
        self.argument_spec: Options = dict(argument_spec or {})
        self.mutually_exclusive: list[t.Sequence[str]] = list(mutually_exclusive or [])
        self.required_together: list[t.Sequence[str]] = list(required_together or [])
        self.required_one_of: list[t.Sequence[str]] = list(required_one_of or [])
        self.required_if: list[t.Sequence[t.Any]] = list(required_if or [])
        self.required_by = dict(required_by or {})

    def update_argspec(self, **options: dict[str, t.Any]) -> ArgumentSpec:
        """Add (or replace) options; returns self, to chain."""
        self.argument_spec.update(options)
        return self

    def merge(self, other: ArgumentSpec) -> ArgumentSpec:
        """Add another part's options and rules (its options win); returns self, to chain.
        Rules alone are added as a part without options: ``ArgumentSpec(required_if=...)``."""
        self.argument_spec.update(other.argument_spec)
        self.mutually_exclusive.extend(other.mutually_exclusive)
        self.required_together.extend(other.required_together)
        self.required_one_of.extend(other.required_one_of)
        self.required_if.extend(other.required_if)
        self.required_by.update(other.required_by)
        return self

    def ansible_module_kwargs(self) -> dict[str, t.Any]:
        """The keyword arguments of AnsibleModule for these options and rules (empty rules
        left out, as a module written by hand leaves them out)."""
        kwargs: dict[str, t.Any] = {"argument_spec": self.argument_spec}
        for rule in _RULES:
            if getattr(self, rule):
                kwargs[rule] = getattr(self, rule)
        if self.required_by:
            kwargs["required_by"] = self.required_by
        return kwargs

    def create_ansible_module(self, **kwargs: t.Any) -> AnsibleModule:
        """The AnsibleModule of these options; `kwargs` as AnsibleModule takes them
        (supports_check_mode, ...)."""
        return AnsibleModule(**self.ansible_module_kwargs(), **kwargs)
