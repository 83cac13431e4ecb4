# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading a JWT's claims (pure).

PRIVATE to the collection: names here can change without notice.

Apart from the slurmrestd client (`rest`) because filters read tokens too, and Ansible
imports every filter file of the collection in each task's worker process: this module
must stay free of the HTTP stack.
"""

from __future__ import annotations

import base64
import json


def token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (Unix time), read without checking the signature; None when
    the token has none or is not a JWT. For warnings only: slurmctld decides validity."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
