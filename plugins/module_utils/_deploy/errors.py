# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The error of a deploy setting that cannot work (pure).

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot work: the variable at fault and what to do."""

    def __init__(self, variable: str, problem: str, fix: str) -> None:
        super().__init__(f"{variable}: {problem}; {fix}")
        self.variable = variable
