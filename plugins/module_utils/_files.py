# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files the modules write for others to read (summaries, node_exporter textfiles).

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations

import os
import tempfile
import typing as t


def write_whole(module: t.Any, path: str, text: str) -> None:
    """Write `text` to `path` whole or not at all (a reader never sees half a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".hpcops-")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.chmod(temporary, 0o644)
    module.atomic_move(temporary, path)
