# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sphinx extension for `make docs`: links to the Ansible docsite without intersphinx.

antsibull-docs' pages refer to labels of the Ansible docsite (the common return values,
the configuration settings and their environment variables, other collections' plugins
such as kubernetes.core.helm). Sphinx resolves those through intersphinx inventories
fetched from docs.ansible.com, which an offline build cannot reach. This extension resolves
them by name instead, to the URL the Ansible docsite uses for them, so the build stays
strict (`-W`) and offline. A label it does not know stays a warning, and so fails the build.
"""

from __future__ import annotations

import re
import typing as t

from docutils import nodes

ANSIBLE_DOCS = "https://docs.ansible.com/projects/ansible/devel/"

# Labels of the Ansible docsite that antsibull-docs' templates refer to.
PAGES = {
    "action_plugins": "plugins/action.html#action-plugins",
    "ansible_configuration_settings": "reference_appendices/config.html#ansible-configuration-settings",
    "common_return_values": "reference_appendices/common_return_values.html#common-return-values",
}

# ansible_collections.<namespace>.<name>.<plugin>_<type>, optionally __<option or return value>
PLUGIN_LABEL = re.compile(r"^ansible_collections\.(\w+)\.(\w+)\.(\w+?_\w+?)(?:__.+)?$")


def ansible_url(reftype: str, target: str, own_collection: str) -> str | None:
    """The docs.ansible.com URL of a label or an environment variable, or None."""
    if reftype == "envvar" and target.startswith("ANSIBLE_"):
        return f"{ANSIBLE_DOCS}reference_appendices/config.html#envvar-{target}"
    if reftype != "ref":
        return None
    if target in PAGES:
        return ANSIBLE_DOCS + PAGES[target]
    match = PLUGIN_LABEL.match(target)
    if not match or f"{match[1]}.{match[2]}" == own_collection:
        return None  # this collection's own labels must resolve inside the docsite
    page = f"collections/{match[1]}/{match[2]}/{match[3]}.html"
    return f"{ANSIBLE_DOCS}{page}#{nodes.make_id(target)}"


def missing_reference(
    app: t.Any, env: t.Any, node: nodes.Element, contnode: nodes.Element
) -> nodes.Element | None:
    url = ansible_url(
        node.get("reftype", ""), node.get("reftarget", ""), app.config.ansible_links_own
    )
    if url is None:
        return None
    reference = nodes.reference("", "", internal=False, refuri=url)
    reference.append(contnode)
    return reference


def setup(app: t.Any) -> dict[str, t.Any]:
    app.add_config_value("ansible_links_own", "hpcops.slinky", "env")
    app.connect("missing-reference", missing_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
