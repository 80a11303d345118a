"""A run grows with the backlog: the pending bytes choose the run's bytes and its EMR job's size.

Driven through the launcher's own planning (`services/pending.run_limits`, `domain/planning.select_segments`)
and the EMR adapter's sizing (`domain/job_sizing.job_size`), on a listing of 256 MiB segments over
four partitions; no I/O.
"""

from __future__ import annotations

from typing import Any

import pytest

from kafscale_iceberg.config import RunnerConfig, RunsConfig
from kafscale_iceberg.domain.job_sizing import job_size
from kafscale_iceberg.domain.planning import ListedSegment, select_segments
from kafscale_iceberg.domain.run_sizing import run_bytes_cap
from kafscale_iceberg.services.pending import run_limits

MIB, GIB = 1024**2, 1024**3
SEGMENT = 256 * MIB
PARTITIONS = 4


def _backlog(pending_bytes: int) -> dict[int, list[ListedSegment]]:
    segments = pending_bytes // SEGMENT
    return {
        p: [
            ListedSegment(p, i * 1000, f"t/{p}/{i}.kfs", SEGMENT, True, 0)
            for i in range(segments // PARTITIONS + (1 if p < segments % PARTITIONS else 0))
        ]
        for p in range(PARTITIONS)
    }


def _emr(max_vcpu: Any = "16 vCPU") -> RunnerConfig:
    """The deployed runner section (template.yaml's variables), with the application's vCPU."""
    return RunnerConfig.model_validate(
        {
            "type": "emr_serverless",
            "emr_serverless": {
                "application_id": "00fabc",
                "execution_role_arn": "arn:aws:iam::123456789012:role/job",
                "entry_point": "s3://runs/spark/spark_app/main.py",
                "venv_archive": "s3://runs/spark/venv.tar.gz",
                "max_vcpu": max_vcpu,
            },
        }
    )


@pytest.mark.parametrize(
    ("pending", "runner", "run_bytes", "job_vcpu"),
    [
        (SEGMENT, _emr(), SEGMENT, 2),  # a live topic's minute: the smallest job
        (GIB, _emr(), GIB, 3),
        (3 * GIB, _emr(), 3 * GIB, 7),  # behind: the run and its job grow ...
        (7 * GIB, _emr(), 7 * GIB, 15),
        (40 * GIB, _emr(), 7 * GIB, 15),  # ... up to what 16 vCPU (EmrMaximumCpu) carries
        (40 * GIB, _emr("64 vCPU"), 8 * GIB, 17),  # a bigger application: runs.max_bytes_per_run
        (40 * GIB, _emr(8), 3 * GIB, 7),
        (40 * GIB, RunnerConfig(), 8 * GIB, None),  # `run`: the configured max alone
    ],
)
def test_the_pending_bytes_choose_the_run_s_bytes_and_its_job(
    pending: int, runner: RunnerConfig, run_bytes: int, job_vcpu: int | None
) -> None:
    limits = run_limits(RunsConfig(), runner=runner)
    selection = select_segments({}, _backlog(pending), limits, now_ms=10**9)
    planned = sum(s.size_bytes for p in selection.partitions for s in p.segments)
    assert planned == run_bytes
    assert len(selection.partitions) == min(PARTITIONS, pending // SEGMENT)  # every partition moves
    if job_vcpu is not None:
        assert job_size(planned, runner.emr_serverless.max_vcpu).vcpu == job_vcpu


def test_the_configured_max_caps_a_run_on_every_runner() -> None:
    assert run_bytes_cap(GIB, "emr_serverless", 64) == GIB
    assert run_bytes_cap(GIB, "local") == GIB
    assert run_limits(RunsConfig(max_bytes_per_run=2 * GIB), runner=_emr()).max_bytes == 2 * GIB


@pytest.mark.parametrize("value", ["sixteen", "16 GB", "2 vCPU"])
def test_a_bad_max_vcpu_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ValueError, match="max_vcpu") as caught:
        _emr(value)
    assert "EmrMaximumCpu" in str(caught.value) or "greater than or equal to 3" in str(caught.value)
