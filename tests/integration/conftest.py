# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures that give integration tests a real Slurm cluster per release (tests/lab/slurm_lab.py).

A lab that is already up is reused and left up; a lab the session starts is taken down when
the session ends.  ``HPCOPS_SLURM_RELEASES`` (e.g. ``26.05`` or ``26.05,24.11``) restricts
the releases the ``slurm_lab`` fixture is parametrised over.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
import k8s_lab
from slurm_lab import RELEASES, TEST_RELEASES, SlurmLab
from toolbox import LabError

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SUPPORTED_API_VERSIONS,
)

# Shared fixture modules that test modules also import from: rewrite their asserts too.
pytest.register_assert_rewrite("handover_pool", "docker_fixtures", "k8s_fixtures")


def selected_releases() -> list[str]:
    raw = os.environ.get("HPCOPS_SLURM_RELEASES", "")
    names = raw.replace(",", " ").split() or TEST_RELEASES
    unknown = [name for name in names if name not in RELEASES]
    if unknown:
        raise pytest.UsageError(
            f"HPCOPS_SLURM_RELEASES: unknown release(s) {unknown}; known: {list(RELEASES)}"
        )
    return names


class LabSession:
    """Starts labs on first use and, at the end of the session, stops those it started."""

    def __init__(self) -> None:
        self.labs: dict[str, SlurmLab] = {}
        self.started: list[SlurmLab] = []

    def get(self, release: str) -> SlurmLab:
        # pytest caches a failure of the session fixture, so a broken lab is tried once only.
        if os.geteuid() != 0:
            pytest.skip("the Slurm lab needs root (chroot, mounts, network namespaces)")
        if release not in self.labs:
            lab = SlurmLab(release)
            if not lab.is_healthy():
                try:
                    lab.up()
                except LabError as err:
                    pytest.fail(f"Slurm {release} lab did not come up: {err}", pytrace=False)
                self.started.append(lab)
            self.labs[release] = lab
        return self.labs[release]

    def close(self) -> None:
        for lab in self.started:
            lab.down()


@pytest.fixture(scope="session")
def lab_session() -> Iterator[LabSession]:
    session = LabSession()
    yield session
    session.close()


@pytest.fixture(scope="session", params=selected_releases(), ids=lambda release: f"slurm-{release}")
def slurm_lab(request: pytest.FixtureRequest, lab_session: LabSession) -> SlurmLab:
    """A running lab for each selected release; teardown belongs to lab_session."""
    return lab_session.get(request.param)


def api_matrix() -> list[tuple[str, str]]:
    """(release, API version) for every version both a selected release and the collection speak."""
    return [
        (release, version)
        for release in selected_releases()
        for version in RELEASES[release].api_versions
        if version in SUPPORTED_API_VERSIONS
    ]


@pytest.fixture(params=api_matrix(), ids=lambda pair: f"slurm-{pair[0]}-{pair[1]}")
def slurm_api(request: pytest.FixtureRequest, lab_session: LabSession) -> tuple[SlurmLab, str]:
    """A running lab and one API version it offers that the collection supports."""
    release, version = request.param
    return lab_session.get(release), version


@pytest.fixture(scope="session")
def first_release() -> str:
    """The release that checks expensive to repeat (a full down and up) run on."""
    return selected_releases()[0]


# molecule's kind scenario (test_molecule_kind.py) needs about ten minutes of Go builds and
# debootstraps on a cold machine. They start in the background, at the lowest CPU priority,
# as soon as the session knows it will run the scenario, and the scenario's tests run last:
# by then the lab tests (mostly waiting on Slurm and Kubernetes) have left the cores idle
# long enough. The image builds wait on the same locks, so nothing is built twice.
KIND_MODULE = "test_molecule_kind.py"
# The Debian host containers of the bare-metal preflight: their roots are in the same
# preparation, so they run last too, before the kind scenarios.
LATE_MODULES = ("test_node_prep.py", KIND_MODULE)
# Tests that need no Kubernetes lab: the Slurm lab (Debian's Slurm in chroots) and the charts
# rendered with helm. `make test` runs them beside the Kubernetes lab's tests; in one
# session they run first, so that on a cold machine the Kubernetes lab's builds, which the
# preparation starts with, go on meanwhile instead of holding up the first Kubernetes test.
EARLY_MODULES = (
    "test_slurm_lab.py",
    "test_slurm_bad_input.py",
    "test_slurm_modules.py",
    "test_slurm_accounting.py",
    "test_role_values_golden.py",
    "test_images_mirrored.py",
)
# The lab's own tests start the Kubernetes tests. The older Slinky line and the upgrade from
# it end them: they need the older operator, whose build (about 2 minutes cold) then goes on
# while the other modules run, and they begin with a fresh lab of their own.
FIRST_KUBERNETES_MODULES = ("test_k8s_lab.py",)
# slurm-bridge's module adds nodes, a partition and the bridge, and takes them away again;
# late, its builds (also the kind images') are done by then.
LAST_KUBERNETES_MODULES = ("test_bridge_lab.py", "test_slinky_upgrade.py")
KIND_PREPARE_LOG = Path(__file__).resolve().parents[2] / ".kind" / "prepare.log"
INTEGRATION_DIR = Path(__file__).resolve().parent


# The phases of a `make test` run, in the order they run; pytest's summary gives each one's time.
PHASES = (
    "unit tests",
    "Slurm lab, charts",
    "Kubernetes lab (kwok)",
    "node_prep hosts",
    "kind scenarios",
)
# Their names for --phases: `make test` runs the Slurm lab and kind each in a pytest process
# of its own, beside the other phases (tests/run_suite.py).
PHASE_NAMES = dict(zip(("units", "slurm", "kwok", "node-prep", "kind"), PHASES, strict=True))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phases",
        default=",".join(PHASE_NAMES),
        help=f"comma-separated phases to run, of {', '.join(PHASE_NAMES)} (default: all)",
    )


def selected_phases(config: pytest.Config) -> set[str]:
    names = [name.strip() for name in config.getoption("phases").split(",") if name.strip()]
    unknown = [name for name in names if name not in PHASE_NAMES]
    if unknown or not names:
        raise pytest.UsageError(
            f"--phases: unknown phase(s) {unknown}; choose among {', '.join(PHASE_NAMES)}"
        )
    return {PHASE_NAMES[name] for name in names}


def phase_of(item: pytest.Item) -> str:
    name = item.path.name
    if INTEGRATION_DIR not in item.path.parents:
        return PHASES[0]  # the unit tests, in the same session under `make test`, come first
    if name in EARLY_MODULES:
        return PHASES[1]
    if name in LATE_MODULES:
        return PHASES[3] if name != KIND_MODULE else PHASES[4]
    return PHASES[2]


# After pytest's own ordering, which groups the tests of each Slurm release together; the
# partition below keeps the order within each group.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    def phase(item: pytest.Item) -> int:
        return PHASES.index(phase_of(item))

    wanted = selected_phases(config)
    deselected = [item for item in items if phase_of(item) not in wanted]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if phase_of(item) in wanted]

    order = {name: index for index, name in enumerate(LATE_MODULES)}
    order |= {
        name: index - len(FIRST_KUBERNETES_MODULES)
        for index, name in enumerate(FIRST_KUBERNETES_MODULES)
    }
    order |= {name: index + 1 for index, name in enumerate(LAST_KUBERNETES_MODULES)}
    items.sort(key=lambda item: (phase(item), order.get(item.path.name, 0)))


phase_times_key = pytest.StashKey[dict[str, float]]()
module_times_key = pytest.StashKey[dict[str, tuple[float, float]]]()
tests_began_key = pytest.StashKey[tuple[float, bool]]()


def _cpu_s() -> float:
    """CPU seconds of this process and of the commands it ran that have ended (ansible-playbook
    and its modules, helm, kubectl). A lab's daemons count in the module that stops them (all
    they used since they started), and kind's containers not at all."""
    own, ended = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Add each test's wall time, with its fixtures' setup and teardown, to its phase, and its
    wall and CPU time to its module's."""
    started, cpu_before = time.monotonic(), _cpu_s()
    yield
    took = time.monotonic() - started
    times = item.config.stash.setdefault(phase_times_key, {})
    phase = phase_of(item)
    times[phase] = times.get(phase, 0.0) + took
    modules = item.config.stash.setdefault(module_times_key, {})
    wall, cpu = modules.get(item.path.name, (0.0, 0.0))
    modules[item.path.name] = (wall + took, cpu + _cpu_s() - cpu_before)


def pytest_terminal_summary(
    terminalreporter: t.Any, exitstatus: int, config: pytest.Config
) -> None:
    """The time of each phase: the CI log says where a run's hour went."""
    if config.option.collectonly:
        return
    times = dict(config.stash.get(phase_times_key, {}))
    began, with_units = config.stash.get(tests_began_key, (0.0, False))
    if with_units and PHASES[0] not in times:  # where the hook above did not see them
        times[PHASES[0]] = time.monotonic() - began - sum(times.values())
    if times:
        terminalreporter.section("time per phase")
        for phase in PHASES:
            if phase in times:
                terminalreporter.write_line(f"{phase:<24} {times[phase] / 60:6.1f} min")
    # Where a phase's time went, module by module (those of a minute or more): the suite is
    # bound by CPU on CI's two cores, so each module's CPU says what a change would save.
    modules = sorted(config.stash.get(module_times_key, {}).items(), key=lambda kv: -kv[1][0])
    if any(wall >= 60 for _name, (wall, _cpu) in modules):
        terminalreporter.section("time per test module (1 min or more)")
        for name, (wall, cpu) in modules:
            if wall >= 60:
                terminalreporter.write_line(
                    f"{name:<40} {wall / 60:6.1f} min {cpu / 60:6.1f} core-min"
                )


def pytest_report_header(config: pytest.Config) -> str:
    """Which Slinky release the lab and kind run, and where each build comes from."""
    return f"Slinky: {k8s_lab.slinky_summary()}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the kind preparation when the kind scenario is among the tests to run."""
    config = session.config
    with_units = any(phase_of(item) == PHASES[0] for item in session.items)
    config.stash[tests_began_key] = (time.monotonic(), with_units)
    if config.option.collectonly or os.geteuid() != 0:
        return
    if not any(item.path.name in LATE_MODULES for item in session.items):
        return
    if os.environ.get("HPCOPS_KIND_PREPARE_PID"):
        return  # `make test` started it before lint
    KIND_PREPARE_LOG.parent.mkdir(exist_ok=True)
    with KIND_PREPARE_LOG.open("w") as log:
        config.stash[kind_prepare_key] = subprocess.Popen(
            ["nice", "-n", "19", sys.executable, str(LAB_DIR / "kind_images.py"), "prepare"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


kind_prepare_key = pytest.StashKey[subprocess.Popen[bytes]]()
LAB_DIR = Path(__file__).resolve().parents[1] / "lab"


def pytest_unconfigure(config: pytest.Config) -> None:
    # Never killed: a debootstrap stopped halfway leaves its mounts behind.
    prepare = config.stash.get(kind_prepare_key, None)
    if prepare is not None:
        prepare.wait()
