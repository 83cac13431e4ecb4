# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover options, shared by handover_plan and node_handover, and the role's settings check.

PRIVATE to the collection. Documented in the doc fragment hpcops.slinky.handover; keep the
two in step.
"""

from __future__ import annotations

import difflib
import math
import re
import typing as t
from collections.abc import Mapping, Sequence
from decimal import Decimal

from ansible.module_utils.common.validation import (
    check_type_dict,
    check_type_float,
    check_type_int,
    check_type_list,
)

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ADMIN_DRAIN_POLICIES,
    ESCALATIONS,
    LEND_WHEN,
    AdminDrainPolicy,
    EscalationPolicy,
    LendWhen,
    PartitionPolicy,
    Policy,
    PolicyError,
)

POLICY_SPEC: dict[str, dict[str, t.Any]] = {
    "pool_selector": {"type": "dict", "required": True},
    "never_touch_selector": {"type": "dict", "default": {}},
    "headroom": {"type": "int", "default": 1},
    "max_lent": {"type": "int"},
    "max_lent_fraction": {"type": "float", "default": 1.0},
    "lend_min_idle_s": {"type": "int", "default": 600},
    "relend_cooldown_s": {"type": "int", "default": 1800},
    "max_changes_per_run": {"type": "int", "default": 8},
    "demand_namespaces": {"type": "list", "elements": "str", "default": []},
    "demand_selector": {"type": "dict", "default": {}},
    "system_namespaces": {
        "type": "list",
        "elements": "str",
        "default": ["kube-system", "kube-node-lease", "kube-public"],
    },
    "partitions": {"type": "dict", "default": {}},
    "default_escalation": {
        "type": "str",
        "choices": list(ESCALATIONS),
        "default": EscalationPolicy.REQUEUE,
    },
    "default_grace_s": {"type": "int", "default": 300},
    "admin_drain": {
        "type": "str",
        "choices": list(ADMIN_DRAIN_POLICIES),
        "default": AdminDrainPolicy.CORDON,
    },
    "lend_when": {"type": "str", "choices": list(LEND_WHEN), "default": LendWhen.IDLE},
    "demand_headroom": {"type": "int", "default": 0},
    "demand_return_idle_s": {"type": "int"},
}


def policy_from_params(params: dict[str, t.Any]) -> Policy:
    """The planner's policy; PolicyError naming the option at fault."""
    partitions: dict[str, PartitionPolicy] = {}
    for name, raw in (params["partitions"] or {}).items():
        if not isinstance(raw, dict) or set(raw) - {"grace_s", "escalation"}:
            raise PolicyError(
                f"policy.partitions.{name}",
                f"{raw!r} is not a mapping of grace_s and escalation",
                "for example {grace_s: 300, escalation: requeue}",
            )
        try:
            grace = int(raw.get("grace_s", params["default_grace_s"]))
        except (TypeError, ValueError):
            raise PolicyError(
                f"policy.partitions.{name}.grace_s", "is not a number", "give seconds"
            ) from None
        partitions[str(name)] = PartitionPolicy(
            grace, str(raw.get("escalation", params["default_escalation"]))
        )
    return Policy(
        pool_selector={str(k): str(v) for k, v in params["pool_selector"].items()},
        never_touch_selector={str(k): str(v) for k, v in params["never_touch_selector"].items()},
        headroom=params["headroom"],
        max_lent=params["max_lent"],
        max_lent_fraction=params["max_lent_fraction"],
        lend_min_idle_s=params["lend_min_idle_s"],
        relend_cooldown_s=params["relend_cooldown_s"],
        max_changes_per_run=params["max_changes_per_run"],
        demand_namespaces=tuple(params["demand_namespaces"]),
        demand_selector={str(k): str(v) for k, v in params["demand_selector"].items()},
        system_namespaces=tuple(params["system_namespaces"]),
        partitions=partitions,
        default_partition=PartitionPolicy(params["default_grace_s"], params["default_escalation"]),
        admin_drain=params["admin_drain"],
        lend_when=params["lend_when"],
        demand_headroom=params["demand_headroom"],
        demand_return_idle_s=params["demand_return_idle_s"],
    )


def handover_argspec() -> ArgumentSpec:
    """A fresh copy of the options of the doc fragment hpcops.slinky.handover."""
    return ArgumentSpec(
        {
            "journal_annotation": {"type": "str", "default": "hpcops.io/handover"},
            "policy": {"type": "dict", "required": True, "options": dict(POLICY_SPEC)},
        }
    )


def handover_module_argspec() -> ArgumentSpec:
    """The options handover_plan and node_handover share: slurmrestd (with token_secret),
    Kubernetes, the handover policy, the lend label and where the NodeSets are."""
    # Imported here, not above: the role's settings check (a filter on the controller) uses
    # this file and needs neither the Kubernetes client nor the slurmrestd one, whose
    # imports took a quarter of a second of every run.
    from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (  # noqa: PLC0415
        kubernetes_argspec,
    )
    from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (  # noqa: PLC0415
        slurmrestd_argspec,
    )

    return (
        slurmrestd_argspec(token_secret=True)
        .merge(kubernetes_argspec())
        .merge(handover_argspec())
        .update_argspec(
            lend_label={"type": "dict", "default": {"hpcops.io/slurm-lent": "true"}},
            nodeset_namespace={"type": "str"},
        )
    )


# ---- the handover role's settings, all checked before a run takes the Lease --------------

# Kubernetes' own patterns: a DNS subdomain (node names, label key prefixes), a DNS label
# (namespaces), a label name (key names and values).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

_SELECTOR_EXAMPLES = {
    "pool_selector": "{hpcops.io/pool: interactive}",
    "never_touch_selector": "{hpcops.io/never-touch: 'true'}",
    "demand_selector": "{hpcops.io/demand: 'true'}",
}
# What the number of each numeric policy setting counts, for the fix.
_POLICY_NUMBER_FIXES = {
    "headroom": "give a number of nodes, for example 2",
    "demand_headroom": "give a number of nodes, for example 1",
    "demand_return_idle_s": "give seconds, for example 1800, or null to keep lent nodes",
    "max_lent": "give a number of nodes, for example 4, or null for no limit",
    "max_lent_fraction": "give a fraction of the pool, for example 0.5",
    "lend_min_idle_s": "give seconds, for example 600",
    "relend_cooldown_s": "give seconds, for example 1800",
    "max_changes_per_run": "give a number of nodes, for example 8",
    "default_grace_s": "give seconds, for example 300",
}
# The range each rule allows, and what a value outside it is.
_RANGES: dict[str, tuple[t.Callable[[float], bool], str]] = {
    "above 0": (lambda value: value > 0, "is not above 0"),
    "1 or more": (lambda value: value >= 1, "is below 1"),
    "0 or more": (lambda value: value >= 0, "is below 0"),
}
# The role's numbers: variable, whole number (an int option) or not (a float one), range,
# fix. The ranges are those the modules enforce: node_handover's check_numbers, lease's
# duration_s and wait_s.
_ROLE_NUMBERS = (
    ("handover_lend_timeout_s", False, "above 0", "give seconds, for example 120"),
    ("handover_pod_timeout_s", False, "above 0", "give seconds, for example 30"),
    ("handover_max_parallel", True, "1 or more", "give a number of nodes, for example 8"),
    (
        "handover_shared_reads_from",
        True,
        "0 or more",
        "give a number of nodes, or 0 to never share",
    ),
    (
        "handover_lease_duration_s",
        True,
        "1 or more",
        "give seconds longer than a run takes, for example 900",
    ),
    ("handover_lease_wait_s", False, "0 or more", "give seconds, or 0 to never wait"),
)
# Beyond any count or seconds that make sense, and short enough to print.
_LARGEST_WHOLE = 10**18
# A value whose problem is already reported; the planner's check sees the default instead.
_REFUSED: t.Final = object()


def _shown(value: t.Any) -> str:
    """A value as a message quotes it: repr, cut short."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python prints
        return "a number too long to print"
    return text if len(text) <= 60 else f"{text[:57]}..."


def _key_text(key: t.Any) -> str:
    """A mapping key as a variable path spells it."""
    return key if isinstance(key, str) else _shown(key)


def _number_text(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def _whole(value: t.Any) -> int | None:
    """The int AnsibleModule makes of `value` for an int option, or None.

    Never of a bool (an int to Python, a mistake in a setting) nor of a fraction.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            if Decimal(value).adjusted() > 100:
                return None  # int() of '1e999999999' would build a billion digits
        except ArithmeticError:
            return None
    try:
        return int(check_type_int(value))
    except (TypeError, ValueError, ArithmeticError):
        return None


def _real(value: t.Any) -> float | None:
    """The float AnsibleModule makes of `value` for a float option (never of a bool, nor
    NaN, which passes every comparison's negation), or None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(check_type_float(value))
    except (TypeError, ValueError, ArithmeticError):
        return None
    return None if math.isnan(number) else number


def _mapping(value: t.Any) -> dict[t.Any, t.Any] | None:
    """The dict AnsibleModule makes of `value` for a dict option ('k=v' or JSON text too)."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        return None
    try:
        result = check_type_dict(value)
    except (TypeError, ValueError):
        return None
    return dict(result) if isinstance(result, dict) else None


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def _within(path: str, outer: str) -> bool:
    return path == outer or path.startswith((f"{outer}.", f"{outer}["))


class _Problems:
    """The problems found so far, and the settings they are about."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.paths: list[str] = []

    def add(self, path: str, problem: str, fix: str) -> None:
        self.note(path, f"{path}: {problem}; {fix}")

    def note(self, path: str, message: str) -> None:
        self.messages.append(message)
        self.paths.append(path)

    def about(self, path: str) -> bool:
        """Whether a problem is reported at `path`, inside it or around it."""
        return any(_within(path, other) or _within(other, path) for other in self.paths)


def _number_setting(value: t.Any, path: str, whole: bool, fix: str, problems: _Problems) -> t.Any:
    number = _whole(value) if whole else _real(value)
    if number is None:
        kind = "a whole number" if whole else "a number"
        problems.add(path, f"{_shown(value)} is not {kind}", fix)
        return _REFUSED
    if whole and abs(number) >= _LARGEST_WHOLE:
        problems.add(path, f"{_shown(value)} is out of range", fix)
        return _REFUSED
    return number


def _selector(key: str, value: t.Any, path: str, problems: _Problems) -> t.Any:
    labels = _mapping(value)
    example = _SELECTOR_EXAMPLES[key]
    if labels is None:
        problems.add(
            path, f"{_shown(value)} is not a mapping", f"give labels, for example {example}"
        )
        return _REFUSED
    found = len(problems.messages)
    for label, label_value in labels.items():
        if not isinstance(label, str) or not _label_key_ok(label):
            problems.add(
                path,
                f"{_shown(label)} is not a label key",
                "give an optional DNS prefix and '/', then at most 63 letters, digits, "
                f"'-', '_' and '.', as in {example}",
            )
            continue
        at = f"{path}[{label!r}]"
        if isinstance(label_value, bool):
            # YAML reads true unquoted as a bool; a label value is always a string
            problems.add(
                at,
                f"{label_value} is a boolean, not a string",
                f"quote it: '{str(label_value).lower()}'",
            )
        elif isinstance(label_value, (int, float)):
            shown = _shown(label_value)
            problems.add(at, f"{shown} is a number, not a string", f"quote it: '{shown}'")
        elif not isinstance(label_value, str):
            problems.add(at, f"{_shown(label_value)} is not a label value", "give a quoted string")
        elif label_value and (len(label_value) > 63 or not _LABEL_NAME.fullmatch(label_value)):
            problems.add(
                at,
                f"{_shown(label_value)} is not a label value",
                "give at most 63 letters, digits, '-', '_' and '.', starting and ending "
                "with a letter or digit",
            )
    return _REFUSED if len(problems.messages) > found else labels


def _namespaces(value: t.Any, path: str, problems: _Problems) -> t.Any:
    names: t.Any = None
    if not isinstance(value, bool):
        try:
            names = check_type_list(value)
        except (TypeError, ValueError):
            names = None
    if not isinstance(names, list):
        problems.add(
            path, f"{_shown(value)} is not a list", "give namespace names, for example [apps]"
        )
        return _REFUSED
    found = len(problems.messages)
    for index, name in enumerate(names):
        at = f"{path}[{index}]"
        if not isinstance(name, str):
            problems.add(at, f"{_shown(name)} is not a string", "give a namespace name")
        elif len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            problems.add(
                at,
                f"{_shown(name)} is not a namespace name",
                "give at most 63 lowercase letters, digits and '-', starting and ending with "
                "a letter or digit",
            )
    return _REFUSED if len(problems.messages) > found else names


def _escalation(value: t.Any, path: str, problems: _Problems) -> t.Any:
    if isinstance(value, str) and value in ESCALATIONS:
        return value
    problems.add(
        path, f"{_shown(value)} is not a known escalation", f"use one of {', '.join(ESCALATIONS)}"
    )
    return _REFUSED


def _choice(value: t.Any, path: str, choices: Sequence[str], problems: _Problems) -> t.Any:
    if isinstance(value, str) and value in choices:
        return value
    problems.add(path, f"{_shown(value)} is not a known choice", f"use one of {', '.join(choices)}")
    return _REFUSED


def _partitions(value: t.Any, path: str, problems: _Problems) -> t.Any:
    table = _mapping(value)
    if table is None:
        problems.add(
            path,
            f"{_shown(value)} is not a mapping",
            "give partitions by name, for example {backfill: {grace_s: 300, escalation: requeue}}",
        )
        return _REFUSED
    partitions: dict[t.Any, dict[str, t.Any]] = {}
    for name, raw in table.items():
        at = f"{path}.{_key_text(name)}"
        if not isinstance(raw, Mapping):
            problems.add(
                at,
                f"{_shown(raw)} is not a mapping of grace_s and escalation",
                "for example {grace_s: 300, escalation: requeue}",
            )
            continue
        # What is refused is left out: the planner sees the default setting instead.
        partition: dict[str, t.Any] = {}
        for field, field_value in raw.items():
            if field == "grace_s":
                grace = _number_setting(
                    field_value, f"{at}.grace_s", True, "give seconds, for example 300", problems
                )
                if grace is not _REFUSED:
                    partition["grace_s"] = grace
            elif field == "escalation":
                escalation = _escalation(field_value, f"{at}.escalation", problems)
                if escalation is not _REFUSED:
                    partition["escalation"] = escalation
            else:
                problems.add(
                    f"{at}.{_key_text(field)}",
                    "is not a partition setting",
                    "give grace_s and escalation",
                )
        partitions[name] = partition
    return partitions


def _policy_setting(key: str, value: t.Any, path: str, problems: _Problems) -> t.Any:
    """`value` as the module's argument spec would take it, or _REFUSED (and reported)."""
    spec = POLICY_SPEC[key]
    if value is None and "default" not in spec and not spec.get("required"):
        return None  # max_lent: no limit; demand_return_idle_s: never
    if spec["type"] in ("int", "float"):
        fix = _POLICY_NUMBER_FIXES.get(key, "give a number")
        return _number_setting(value, path, spec["type"] == "int", fix, problems)
    if key in _SELECTOR_EXAMPLES:
        return _selector(key, value, path, problems)
    if key == "partitions":
        return _partitions(value, path, problems)
    if spec["type"] == "list":
        return _namespaces(value, path, problems)
    if key == "admin_drain":
        return _choice(value, path, ADMIN_DRAIN_POLICIES, problems)
    if key == "lend_when":
        return _choice(value, path, LEND_WHEN, problems)
    return _escalation(value, path, problems)  # default_escalation


def _check_policy(settings: Mapping[str, t.Any], problems: _Problems) -> None:
    user = settings.get("handover_policy", {})
    if not isinstance(user, Mapping):
        problems.note(
            "handover_policy",
            "handover_policy: give a mapping of policy settings, for example {headroom: 2}",
        )
        return
    defaults = settings.get("handover_policy_defaults", {})
    if not isinstance(defaults, Mapping):
        problems.add(
            "handover_policy_defaults",
            f"{_shown(defaults)} is not a mapping",
            "give a mapping of policy settings, as in the role's defaults",
        )
        defaults = {}

    def variable(key: t.Any) -> str:
        """Where a top-level setting was written: combine() lets the user's replace the
        default's whole value."""
        source = (
            "handover_policy_defaults" if key in defaults and key not in user else "handover_policy"
        )
        return f"{source}.{_key_text(key)}"

    # As AnsibleModule fills an option left out; pool_selector is required, so reported.
    params = {key: spec.get("default") for key, spec in POLICY_SPEC.items()}
    params["pool_selector"] = {}
    combined = {**defaults, **user}
    if "pool_selector" not in combined:
        problems.add(
            "handover_policy.pool_selector",
            "is missing",
            f"give the labels of the lendable pool's nodes, for example {_SELECTOR_EXAMPLES['pool_selector']}",
        )
    for key, value in combined.items():
        if not isinstance(key, str) or key not in POLICY_SPEC:
            close = difflib.get_close_matches(_key_text(key), list(POLICY_SPEC), n=1)
            fix = f"did you mean {close[0]}?" if close else f"use one of {', '.join(POLICY_SPEC)}"
            problems.add(variable(key), "is not a policy setting", fix)
            continue
        setting = _policy_setting(key, value, variable(key), problems)
        if setting is not _REFUSED:
            params[key] = setting

    # The ranges are the planner's own: its check, on the policy the modules would build.
    try:
        errors = policy_from_params(params).problems()
    except PolicyError as error:
        errors = [error]
    for err in errors:
        setting = err.setting.removeprefix("policy.")
        # The planner names the defaults after its partition "(default)".
        setting = {
            "partitions.(default).escalation": "default_escalation",
            "partitions.(default).grace_s": "default_grace_s",
        }.get(setting, setting)
        key, dot, rest = setting.partition(".")
        path = f"{variable(key)}{dot}{rest}"
        if not problems.about(path):  # a refused value's default stood in for it
            problems.note(path, f"{path}{str(err)[len(err.setting) :]}")


def _check_nodes(nodes: t.Any, problems: _Problems) -> None:
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Sequence):
        problems.note(
            "handover_nodes",
            "handover_nodes: give a list of Kubernetes node names, for example [int01, int02]",
        )
        return
    seen: set[str] = set()
    for index, name in enumerate(nodes):
        at = f"handover_nodes[{index}]"
        if not isinstance(name, str):
            problems.add(at, f"{_shown(name)} is not a string", "give a Kubernetes node name")
        elif not name:
            problems.add(at, "'' is empty", "give a Kubernetes node name")
        elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            problems.add(
                at,
                f"{_shown(name)} is not a Kubernetes node name",
                "give lowercase letters, digits, '-' and '.', starting and ending with a "
                "letter or digit, at most 253 characters",
            )
        elif name in seen:
            problems.add(at, f"{name} is named twice", "name each node once")
        else:
            seen.add(name)


def settings_problems(settings: Mapping[str, t.Any]) -> list[str]:
    """Every problem of the handover role's settings, as '<variable>: <problem>; <fix>'.

    `settings` holds the role's variables after templating (handover_policy,
    handover_policy_defaults, handover_nodes and the timings and counts); a variable left
    out is not checked. Values are taken as the modules' argument specs take them ('30' for
    an int), the ranges are the planner's and the modules' own. Pure, and never raises: an
    empty list means the settings work.
    """
    if not isinstance(settings, Mapping):
        return [
            f"settings: {_shown(settings)} is not a mapping; give the handover role's "
            "variables by name, for example {handover_nodes: [int01]}"
        ]
    problems = _Problems()
    if "handover_policy" in settings or "handover_policy_defaults" in settings:
        _check_policy(settings, problems)
    if "handover_nodes" in settings:
        _check_nodes(settings["handover_nodes"], problems)
    for variable, whole, rule, fix in _ROLE_NUMBERS:
        if variable not in settings:
            continue
        number = _number_setting(settings[variable], variable, whole, fix, problems)
        allowed, problem = _RANGES[rule]
        if number is not _REFUSED and not allowed(number):
            problems.add(variable, f"{_number_text(number)} {problem}", fix)
    return problems.messages


# ---- the policy against the cluster, checked by handover_check before the Lease ------------

# A comma between two names of a host list, not one inside brackets (cpu[01,03]).
_HOSTLIST_COMMA = re.compile(r",(?![^\[]*\])")


def lendable_partitions(
    partitions: Sequence[Mapping[str, t.Any]], nodeset_keys: Sequence[str]
) -> list[str]:
    """The Slurm partitions lent nodes can serve: those whose NodeSets or configured nodes
    name a lendable NodeSet (Slinky writes `NodeSet=<key> Feature=<key>`, and partitions name
    the key) or ALL."""
    keys = set(nodeset_keys) | {"ALL"}
    found = set()
    for partition in partitions:
        named = set()
        for field in ("node_sets", "nodes"):
            named.update(_HOSTLIST_COMMA.split(str(partition.get(field) or "")))
        if named & keys:
            found.add(str(partition.get("name")))
    return sorted(found)


def policy_partition_refusals(
    named: Sequence[str],
    partitions: Sequence[Mapping[str, t.Any]],
    nodeset_keys: Sequence[str],
    variable: str = "handover_policy.partitions",
) -> list[str]:
    """Each partition the policy names that lent nodes cannot be in, with the fix.

    A typo there would not be noticed otherwise: the reclaim would give that partition's jobs
    the default grace and escalation. When no partition is known to hold the lendable NodeSets
    (none found, or none lendable), every partition of the cluster counts.
    """
    every = sorted(str(partition.get("name")) for partition in partitions)
    lendable = lendable_partitions(partitions, nodeset_keys)
    allowed = lendable or every
    if lendable:
        where = (
            f"a Slurm partition of the lendable NodeSets ({', '.join(sorted(nodeset_keys))}; "
            f"theirs: {', '.join(lendable)})"
        )
    else:
        where = f"a Slurm partition (the cluster's: {', '.join(every) or 'none'})"
    refusals = []
    for name in named:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        fix = f"did you mean {close[0]}?" if close else "name one of those, or leave it out"
        refusals.append(f"{variable}.{name}: is not {where}; {fix}")
    return refusals
