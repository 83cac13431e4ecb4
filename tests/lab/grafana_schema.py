# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The JSON schema of a Grafana dashboard, from Grafana's own published types.

Grafana publishes its dashboard model as TypeScript types in the npm package
``@grafana/schema`` (generated from its CUE kinds).  This turns the ``Dashboard`` type into a
JSON schema with ``ts-json-schema-generator`` (both pinned in ``grafana-schema/``), once per
cache, so tests can check a dashboard the way Grafana's model defines it: unknown fields,
wrong types and missing required fields are errors.

    python3 tests/lab/grafana_schema.py <dashboard.json>...   # check files, print errors
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import jsonschema
from toolbox import CACHE_DIR

PACKAGE_DIR = Path(__file__).resolve().parent / "grafana-schema"
TYPES = "node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts"


def _versions() -> str:
    deps = json.loads((PACKAGE_DIR / "package.json").read_text())["dependencies"]
    return "-".join(f"{name.rsplit('/', 1)[-1]}{version}" for name, version in sorted(deps.items()))


def dashboard_schema() -> dict[str, t.Any]:
    """The schema (draft 7) of Grafana's Dashboard type, built on first use."""
    work = CACHE_DIR / "grafana-schema" / _versions()
    schema_path = work / "dashboard.schema.json"
    if not schema_path.exists():
        if shutil.which("npm") is None:
            raise RuntimeError("npm is missing: install Node.js and npm (Debian: nodejs npm)")
        work.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PACKAGE_DIR / name, work / name)
        quiet = ["--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"]
        subprocess.run(["npm", "ci", *quiet], cwd=work, check=True)
        partial = work / "dashboard.schema.json.partial"
        subprocess.run(
            [
                str(work / "node_modules/.bin/ts-json-schema-generator"),
                f"--path={work / TYPES}",
                "--type=Dashboard",
                "--no-type-check",
                f"--out={partial}",
            ],
            cwd=work,
            check=True,
        )
        partial.rename(schema_path)
    schema: dict[str, t.Any] = json.loads(schema_path.read_text())
    return schema


def dashboard_errors(dashboard: t.Any) -> list[str]:
    """What is wrong with a dashboard by Grafana's model, a line each (none: valid)."""
    validator = jsonschema.Draft7Validator(dashboard_schema())
    return [
        f"{'/'.join(str(part) for part in error.absolute_path) or '.'}: {error.message}"
        for error in sorted(
            validator.iter_errors(dashboard), key=lambda e: [str(p) for p in e.absolute_path]
        )
    ]


def main(argv: list[str]) -> int:
    failed = 0
    for path in argv:
        errors = dashboard_errors(json.loads(Path(path).read_text()))
        for error in errors:
            print(f"{path}: {error}")
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
