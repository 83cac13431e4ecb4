# SPDX-License-Identifier: GPL-3.0-or-later
"""How tests/lab/k8s_binaries.py cuts KEDA's buildScaler to the lab's trigger types: the
cases kept whole with the default, which constructors go, and a clear error when KEDA's
file is not shaped as the cut expects."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
from k8s_binaries import KEDA_LAB_TRIGGERS, trim_keda_triggers
from toolbox import LabError

# The shape of KEDA's pkg/scaling/scalers_builder.go: one case per trigger type, between
# the markers its code generator keeps.
BUILDER = """package scaling

func buildScaler(ctx context.Context, triggerType string, config *Config) (scalers.Scaler, error) {
\t// TRIGGERS-START
\tswitch triggerType {
\tcase "aws-sqs-queue":
\t\treturn scalers.NewAwsSqsQueueScaler(ctx, config)
\tcase "cpu":
\t\treturn scalers.NewCPUMemoryScaler(corev1.ResourceCPU, config)
\t// a comment between cases
\tcase "memory":
\t\treturn scalers.NewCPUMemoryScaler(corev1.ResourceMemory, config)
\tcase "prometheus":
\t\treturn scalers.NewPrometheusScaler(config)
\tcase "redis":
\t\treturn scalers.NewRedisScaler(ctx, false, false, config)
\tcase "redis-cluster":
\t\treturn scalers.NewRedisScaler(ctx, true, false, config)
\tdefault:
\t\treturn nil, fmt.Errorf("no scaler found for type: %s", triggerType)
\t}
\t// TRIGGERS-END
}
"""


def test_only_the_wanted_cases_and_the_default_are_left() -> None:
    trim = trim_keda_triggers(BUILDER, ["prometheus", "cpu"])
    assert '"prometheus"' in trim.builder and '"cpu"' in trim.builder
    for gone in ('"aws-sqs-queue"', '"memory"', '"redis"', '"redis-cluster"'):
        assert gone not in trim.builder
    assert 'fmt.Errorf("no scaler found for type: %s", triggerType)' in trim.builder
    assert trim.builder.startswith("package scaling\n\nfunc buildScaler(")
    assert trim.builder.rstrip().endswith("// TRIGGERS-END\n}")


def test_a_constructor_a_kept_case_calls_is_never_dropped() -> None:
    trim = trim_keda_triggers(BUILDER, ["cpu"])  # memory's constructor is cpu's too
    assert trim.kept == {"NewCPUMemoryScaler"}
    assert trim.dropped == {"NewAwsSqsQueueScaler", "NewPrometheusScaler", "NewRedisScaler"}


def test_a_wanted_type_without_a_case_is_named() -> None:
    with pytest.raises(LabError, match=r"no case for the trigger types \['metrics-api'\]"):
        trim_keda_triggers(BUILDER, ["prometheus", "metrics-api"])


def test_a_builder_without_the_markers_is_refused() -> None:
    with pytest.raises(LabError, match="TRIGGERS-START"):
        trim_keda_triggers(BUILDER.replace("// TRIGGERS-START", ""), ["cpu"])


def test_the_roles_triggers_are_among_the_labs() -> None:
    template = Path(__file__).resolve().parents[3] / "roles/keda/templates/scaled_object.yml.j2"
    used = {
        line.split(":", 1)[1].strip()
        for line in template.read_text().splitlines()
        if line.strip().startswith("type:")
    }
    assert used and used <= set(KEDA_LAB_TRIGGERS)
