# SPDX-License-Identifier: GPL-3.0-or-later
"""The README's table of contents, written from each part's own documentation.

    python3 docs/readme_contents.py           # rewrite the table in README.md
    python3 docs/readme_contents.py --check   # exit 1 when README.md's table is not current

Playbooks by the first sentence of their leading comment; roles by the short description of
their main argument spec; modules and the inventory plugin by their DOCUMENTATION; filters
by their DOCUMENTATION files. `make lint` runs the check, so the table cannot drift.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
START = "<!-- contents: written by docs/readme_contents.py from the plugins' own docs -->"
END = "<!-- end of contents -->"
NAMESPACE = "hpcops.slinky"


def python_documentation(path: Path) -> dict[str, Any]:
    """A plugin's DOCUMENTATION, read without importing it."""
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            doc: dict[str, Any] = yaml.safe_load(node.value.value)
            return doc
    raise SystemExit(f"{path.relative_to(REPO)}: no DOCUMENTATION")


def playbook_summary(path: Path) -> str:
    """The first sentence of a playbook's leading comment."""
    words: list[str] = []
    for line in path.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text:
            if words:
                break
            continue
        words.append(text)
    summary = " ".join(words)
    match = re.match(r"(.+?[.:])(\s|$)", summary)
    return (match.group(1) if match else summary).rstrip(".:")


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def rows() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        found.append((f"`playbooks/{path.name}`", "playbook", playbook_summary(path)))
    for spec in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        main = yaml.safe_load(spec.read_text())["argument_specs"]["main"]
        found.append((f"`{NAMESPACE}.{spec.parents[1].name}`", "role", main["short_description"]))
    for kind in ("modules", "inventory"):
        for path in sorted((REPO / "plugins" / kind).glob("*.py")):
            if path.name.startswith("_"):
                continue
            doc = python_documentation(path)
            label = "module" if kind == "modules" else "inventory"
            found.append((f"`{NAMESPACE}.{path.stem}`", label, doc["short_description"]))
    for path in sorted((REPO / "plugins" / "filter").glob("*.yml")):
        doc = yaml.safe_load(path.read_text())["DOCUMENTATION"]
        found.append((f"`{NAMESPACE}.{doc['name']}`", "filter", doc["short_description"]))
    return found


def table() -> str:
    lines = [START, "", "| name | type | what it does |", "| --- | --- | --- |"]
    lines += [f"| {name} | {kind} | {cell(text)} |" for name, kind, text in rows()]
    return "\n".join([*lines, "", END])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    args = parser.parse_args(argv)
    text = README.read_text()
    if START not in text or END not in text:
        print(f"README.md has no contents markers ({START} ... {END})", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    _old, tail = rest.split(END, 1)
    new = head + table() + tail
    if args.check:
        if new != text:
            print(
                "README.md's table of contents is not current: run python3 docs/readme_contents.py",
                file=sys.stderr,
            )
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
