"""LFS metrics from a committed run's result: Go's names, exact histogram counts, one EMF value per bucket."""

from __future__ import annotations

import pytest
from aws_lambda_powertools import Metrics

from kafscale_iceberg.domain.runs import LfsCounts, RunResult
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    LFS_DURATION_BUCKETS,
    EmfMetricsSink,
    PrometheusMetricsSink,
    record_commit,
)
from tests.test_metrics import TOPIC, _outcome, _plan, _result, emf_records


def _lfs_result() -> RunResult:
    counts = [0] * (len(LFS_DURATION_BUCKETS) + 1)
    sums = [0.0] * len(counts)
    counts[1], sums[1] = 300, 300 * 0.008  # 300 blobs in (0.005, 0.01]
    counts[4], sums[4] = 2, 0.17  # 2 blobs in (0.05, 0.1]
    result = _result()
    lfs = {
        "resolved": 302,
        "resolved_bytes": 5_000_000,
        "errors": {"missing_blob": 2, "checksum": 1},
        "duration_counts": counts,
        "duration_sums": sums,
    }
    return result.model_copy(
        update={
            "counts": result.counts.model_copy(
                update={"skipped_lfs": 4, "lfs": LfsCounts.model_validate(lfs)}
            )
        }
    )


def test_prometheus_gets_go_names_and_exact_histogram_counts() -> None:
    sink = PrometheusMetricsSink()
    record_commit(sink, _plan(), _lfs_result(), _outcome(newly=True), started_at=1013.0, ended_at=1014.25)
    text = sink.exposition().decode()
    assert f'kafscale_processor_records_total{{result="skipped_lfs",topic="{TOPIC}"}} 4.0' in text
    assert f'kafscale_processor_lfs_resolved_total{{topic="{TOPIC}"}} 302.0' in text
    assert f'kafscale_processor_lfs_resolved_bytes_total{{topic="{TOPIC}"}} 5e+06' in text
    assert f'kafscale_processor_lfs_resolution_errors_total{{reason="checksum",topic="{TOPIC}"}} 1.0' in text
    assert (
        f'kafscale_processor_lfs_resolution_duration_seconds_bucket{{le="0.01",topic="{TOPIC}"}} 300.0'
        in text
    )
    assert (
        f'kafscale_processor_lfs_resolution_duration_seconds_bucket{{le="0.1",topic="{TOPIC}"}} 302.0' in text
    )
    assert f'kafscale_processor_lfs_resolution_duration_seconds_sum{{topic="{TOPIC}"}} 2.57' in text


def test_runs_without_lfs_emit_no_lfs_series() -> None:
    sink = PrometheusMetricsSink()
    record_commit(sink, _plan(), _result(), _outcome(newly=True), started_at=1013.0, ended_at=1014.25)
    text = sink.exposition().decode()
    assert "skipped_lfs" not in text
    assert "lfs_resolved_total{" not in text


def test_emf_gets_one_duration_value_per_bucket(capsys: pytest.CaptureFixture[str]) -> None:
    sink = EmfMetricsSink(Metrics(namespace=EMF_NAMESPACE, service="commit"))
    record_commit(sink, _plan(), _lfs_result(), _outcome(newly=True), started_at=1013.0, ended_at=1014.25)
    sink.flush()
    records = emf_records(capsys.readouterr().out)
    durations = [v for r in records for v in r.get("lfs_resolution_duration_seconds", [])]
    assert durations == pytest.approx([0.008, 0.085])
