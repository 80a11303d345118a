"""Metrics: what the helpers compute from runs, the Prometheus endpoint scraped over HTTP, EMF as printed."""

from __future__ import annotations

import logging
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from prometheus_client.parser import text_string_to_metric_families

from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.exceptions import (
    CatalogUnavailableError,
    ConfigError,
    LeaseLostError,
    MetricsServerError,
    QueueUnavailableError,
    SegmentIncompleteError,
)
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.wiring import MetricsObserver
from kafscale_iceberg.metrics import (
    ALL_METRICS,
    EMF_NAMESPACE,
    EMF_SERVICE,
    ERRORS,
    LAG_RECORDS,
    LAG_SECONDS,
    METRICS_ADDR_ENV,
    RECORDS,
    EmfMetricsSink,
    ErrorStage,
    MetricsServer,
    PrometheusMetricsSink,
    Sample,
    error_stage,
    parse_metrics_address,
    queue_to_start_seconds,
    record_abort,
    record_commit,
    record_commit_failure,
    record_error,
    record_route_failure,
    sample,
)
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from tests.support.config_documents import local_document
from tests.support.lambdas import emf_records

TOPIC = "orders"


def _plan() -> RunPlan:
    """Two partitions, three segments; launched at t=1000 s; segments landed at 990 s and 995 s."""
    return RunPlan.model_validate(
        {
            "run_id": "orders-run-a0",
            "topic": TOPIC,
            "created_at_ms": 1_000_000,
            "source": {"bucket": "segments"},
            "partitions": [
                {
                    "partition": 0,
                    "start_exclusive": -1,
                    "end_inclusive": 19,
                    "segments": [
                        _segment(0, 0, 9, landed_ms=990_000),
                        _segment(0, 10, 19, landed_ms=995_000),
                    ],
                },
                {
                    "partition": 1,
                    "start_exclusive": 9,
                    "end_inclusive": 29,
                    "segments": [_segment(1, 10, 29, landed_ms=996_000)],
                },
            ],
            "table": {"identifier": "lake.orders", "data_uri": "s3://w/lake/orders/data/r"},
            "dead_letter_table": {"identifier": "lake.orders__dlq", "data_uri": "s3://w/dlq/r"},
            "conversion": {},
            "result_uri": "s3://runs/orders/r/result.json",
        }
    )


def _segment(partition: int, base: int, last: int, *, landed_ms: int | None) -> dict[str, Any]:
    return {
        "key": f"ns/orders/{partition}/segment-{base:020d}.kfs",
        "base_offset": base,
        "last_offset": last,
        "size_bytes": 100,
        "last_modified_ms": landed_ms,
    }


def _result() -> RunResult:
    """Job ran 1005.0 s -> 1012.5 s; 25 written, 2 invalid, one quarantined segment of 10 offsets,
    4 already-committed records dropped."""
    return RunResult.model_validate(
        {
            "run_id": "orders-run-a0",
            "topic": TOPIC,
            "status": "succeeded",
            "partitions": [
                {
                    "partition": 0,
                    "records_written": 18,
                    "records_dead_lettered": 2,
                    "max_timestamp_ms": 7_000,
                },
                {
                    "partition": 1,
                    "records_written": 7,
                    "records_dead_lettered": 1,
                    "max_timestamp_ms": 8_000,
                    "quarantined": [
                        {
                            "key": "ns/orders/1/segment-x.kfs",
                            "base_offset": 20,
                            "last_offset": 29,
                            "error": "crc",
                        }
                    ],
                },
            ],
            "counts": {
                "written": 25,
                "dead_lettered": 3,
                "out_of_range": 4,
                "segments_read": 3,
                "conversion_failures": {"at": 2, "total": 1},
                "dead_letter_reasons": {"undecodable": 2, "corrupt_segment": 1},
            },
            "timings": {"started_at_ms": 1_005_000, "ended_at_ms": 1_012_500},
        }
    )


def _outcome(*, newly: bool) -> CommitOutcome:
    return CommitOutcome(
        run_id="orders-run-a0",
        topic=TOPIC,
        table_committed=newly,
        dead_letter_committed=newly,
        table_snapshot_id=1,
        offsets={0: 19, 1: 29},
        offsets_written={0: 19, 1: 29} if newly else {},
    )


def _commit(sink: Any, *, newly: bool = True) -> None:
    # The commit step ran 1013.0 s -> 1014.25 s.
    record_commit(sink, _plan(), _result(), _outcome(newly=newly), started_at=1013.0, ended_at=1014.25)


# -- Prometheus ------------------------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[PrometheusMetricsSink, MetricsServer]]:
    sink = PrometheusMetricsSink()
    server = MetricsServer(sink, "127.0.0.1:0")
    server.start()
    yield sink, server
    server.stop()


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, content_type, body = _get(port, "/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return f"kafscale_processor_{name}", frozenset(labels.items())


def test_a_commit_is_scraped_under_the_go_processors_names_with_exact_values(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    sink, server = served
    _commit(sink)
    scraped = _scrape(server.port)

    records = {r: scraped[_key("records_total", topic=TOPIC, result=r)] for r in RECORD_RESULTS}
    # Issue 12 §6: records repeated by an overlapping segment are "overlapped", not "dropped".
    assert records == {"written": 25, "dropped": 0, "invalid": 2, "quarantined": 10, "overlapped": 4}
    assert scraped[_key("batches_total", topic=TOPIC)] == 3
    assert scraped[_key("conversion_failures_total", topic=TOPIC, column="at")] == 2
    assert scraped[_key("conversion_failures_total", topic=TOPIC, column="total")] == 1
    assert scraped[_key("dead_letters_total", topic=TOPIC, reason="undecodable")] == 2
    assert scraped[_key("dead_letters_total", topic=TOPIC, reason="corrupt_segment")] == 1
    assert scraped[_key("runs_total", topic=TOPIC, outcome="committed")] == 1
    assert scraped[_key("consecutive_failures", topic=TOPIC)] == 0
    # 7.5 s of job + 1.25 s of commit; the 8.75 s land in the 10 s bucket, not the 5 s one.
    assert scraped[_key("write_latency_ms_sum", topic=TOPIC)] == 8750
    assert scraped[_key("write_latency_ms_count", topic=TOPIC)] == 1
    assert scraped[_key("write_latency_ms_bucket", topic=TOPIC, le="5000.0")] == 0
    assert scraped[_key("write_latency_ms_bucket", topic=TOPIC, le="10000.0")] == 1
    assert scraped[_key("run_duration_seconds_sum", topic=TOPIC, outcome="committed")] == 14.25
    assert scraped[_key("queue_to_start_latency_seconds_sum", topic=TOPIC)] == 15  # 1005 - 990
    for partition, offset, stamp in (("0", 19, 7_000), ("1", 29, 8_000)):
        assert scraped[_key("last_offset", topic=TOPIC, partition=partition)] == offset
        assert scraped[_key("watermark_offset", topic=TOPIC, partition=partition)] == offset
        assert scraped[_key("watermark_timestamp_ms", topic=TOPIC, partition=partition)] == stamp


RECORD_RESULTS = ("written", "dropped", "invalid", "quarantined", "overlapped")


def test_a_replayed_commit_step_counts_the_run_but_not_its_records_again(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    sink, server = served
    _commit(sink)
    _commit(sink, newly=False)
    scraped = _scrape(server.port)
    assert scraped[_key("records_total", topic=TOPIC, result="written")] == 25
    assert scraped[_key("batches_total", topic=TOPIC)] == 3
    assert scraped[_key("conversion_failures_total", topic=TOPIC, column="at")] == 2
    assert scraped[_key("runs_total", topic=TOPIC, outcome="committed")] == 1
    assert scraped[_key("runs_total", topic=TOPIC, outcome="already_committed")] == 1
    assert scraped[_key("write_latency_ms_count", topic=TOPIC)] == 1


def test_an_abort_counts_the_failure_and_an_alarmable_gauge(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    sink, server = served
    record_abort(sink, TOPIC, 1, run_started_at=1000.0, ended_at=1030.5)
    record_abort(sink, TOPIC, 2, run_started_at=2000.0, ended_at=2010.0)
    scraped = _scrape(server.port)
    assert scraped[_key("runs_total", topic=TOPIC, outcome="aborted")] == 2
    assert scraped[_key("errors_total", stage="job")] == 2
    assert scraped[_key("consecutive_failures", topic=TOPIC)] == 2
    assert scraped[_key("run_duration_seconds_sum", topic=TOPIC, outcome="aborted")] == 40.5
    assert scraped[_key("run_duration_seconds_count", topic=TOPIC, outcome="aborted")] == 2


def test_lag_and_errors_by_stage(served: tuple[PrometheusMetricsSink, MetricsServer]) -> None:
    sink, server = served
    for lag_records, lag_seconds in ((120, 4.5), (20, 1.0)):  # a gauge: the newer value replaces the older
        sink.emit(
            [
                sample(LAG_RECORDS, lag_records, topic=TOPIC, partition=3),
                sample(LAG_SECONDS, lag_seconds, topic=TOPIC, partition=3),
            ]
        )
    record_error(sink, "discover")
    record_commit_failure(sink, LeaseLostError(TOPIC, 7, "orders-run-a0", "the lease expired"))
    record_commit_failure(sink, ConfigError("iceberg.catalog.uri", "bad"))
    scraped = _scrape(server.port)
    assert scraped[_key("lag_records", topic=TOPIC, partition="3")] == 20
    assert scraped[_key("lag_seconds", topic=TOPIC, partition="3")] == 1.0
    assert scraped[_key("errors_total", stage="discover")] == 1
    assert scraped[_key("errors_total", stage="checkpoint")] == 1
    assert scraped[_key("errors_total", stage="sink")] == 1


def test_a_failure_counts_under_the_dependency_that_failed_else_the_callers_stage() -> None:
    lease_lost = LeaseLostError(TOPIC, 7, "orders-run-a0", "the lease expired")
    catalog_down = CatalogUnavailableError("sql", "load table", "refused")
    queue_down = QueueUnavailableError("send failed")
    bad_config = ConfigError("s3.bucket", "gone")
    for default in ErrorStage:
        assert error_stage(lease_lost, default=default) is ErrorStage.CHECKPOINT
        assert error_stage(catalog_down, default=default) is ErrorStage.SINK
        assert error_stage(queue_down, default=default) is ErrorStage.ROUTE
        assert error_stage(bad_config, default=default) is default


def test_the_one_machine_loop_counts_a_lease_lost_at_commit_as_the_lambda_does(
    served: tuple[PrometheusMetricsSink, MetricsServer], tmp_path: Path
) -> None:
    """The loop reports a failed commit in its `sink` stage and the commit Lambda through
    `record_commit_failure`; both classify through `error_stage`, so a lost lease is `checkpoint` in
    both. (The loop's report is driven at its error seam: a real commit needs a Spark job.)"""
    sink, server = served
    config = config_from_mapping(
        local_document(
            tmp_path,
            None,
            bucket="segments",
            s3={"region": "us-east-1"},
            runs={"location": str(tmp_path / "runs")},
            mappings=[{"topic": TOPIC, "table": "prod.orders"}],
        ),
        source="test",
    )
    runner: Any = object()  # never called: no run is driven
    pipeline = Pipeline(Assembly(config, owner_id="test"), runner, observer=MetricsObserver(sink))
    lease_lost = LeaseLostError(TOPIC, 7, "orders-run-a0", "the lease expired")

    pipeline._error(ErrorStage.SINK, TOPIC, lease_lost)  # what `_commit` does with a failure
    record_commit_failure(sink, lease_lost)  # what the commit Lambda does

    scraped = _scrape(server.port)
    assert scraped[_key("errors_total", stage="checkpoint")] == 2
    assert _key("errors_total", stage="sink") not in scraped


def test_a_kfs_notification_before_its_index_is_deferred_not_an_error(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    sink, server = served
    record_route_failure(sink, SegmentIncompleteError("index not landed"))
    record_route_failure(sink, ConfigError("s3.bucket", "gone"))
    scraped = _scrape(server.port)
    assert scraped[_key("notifications_deferred_total")] == 1
    assert scraped[_key("errors_total", stage="route")] == 1


def test_healthz_answers_ok_and_other_paths_are_not_found(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    _, server = served
    assert _get(server.port, "/healthz") == (200, "text/plain; charset=utf-8", "ok")
    assert _get(server.port, "/nope")[0] == 404


def test_a_client_gone_before_the_answer_is_a_debug_line_not_a_traceback(
    served: tuple[PrometheusMetricsSink, MetricsServer],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, server = served
    # The answer waits for the readiness lock, held here until the client has reset its connection.
    with caplog.at_level(logging.DEBUG, logger="kafscale_iceberg.metrics.prometheus"):
        with server.readiness._lock:
            client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # an RST: the probe timed out
            time.sleep(0.3)
        for _ in range(50):
            if any("went away" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.1)

    assert any("went away" in r.getMessage() for r in caplog.records), caplog.records
    assert "Traceback" not in capsys.readouterr().err
    assert _get(server.port, "/healthz")[0] == 200  # and it keeps serving


def test_every_metric_is_exposed_under_the_kafscale_processor_namespace() -> None:
    sink = PrometheusMetricsSink()
    names = {family.name for family in text_string_to_metric_families(sink.exposition().decode())}
    expected = {f"kafscale_processor_{m.name.removesuffix('_total')}" for m in ALL_METRICS}
    assert expected <= names


def test_each_sink_has_its_own_registry() -> None:
    first, second = PrometheusMetricsSink(), PrometheusMetricsSink()
    record_error(first, "sink")
    assert b'errors_total{stage="sink"} 1.0' in first.exposition()
    assert b'stage="sink"' not in second.exposition()


def test_a_stopped_server_no_longer_listens() -> None:
    server = MetricsServer(PrometheusMetricsSink(), "127.0.0.1:0")
    port = server.start()
    assert _get(port, "/healthz")[0] == 200
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9093", ("", 9093)),
        ("0.0.0.0:9093", ("0.0.0.0", 9093)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9093", ("::1", 9093)),
        (" localhost:80 ", ("localhost", 80)),
    ],
)
def test_metrics_addresses_take_gos_host_port_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_metrics_address(text) == expected


@pytest.mark.parametrize("text", ["9093", "localhost", ":http", ":70000", "::1:9093", "[::1:9093", "a b:1"])
def test_a_bad_metrics_address_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        MetricsServer.from_environment(PrometheusMetricsSink(), {METRICS_ADDR_ENV: text})
    assert caught.value.key == METRICS_ADDR_ENV
    assert METRICS_ADDR_ENV in str(caught.value)
    assert repr(text) in str(caught.value)


def test_the_default_metrics_address_is_off_kafkas_ports() -> None:
    """Not the Go processor's :9093, Kafka's usual SSL listener port (issue 35)."""
    server = MetricsServer.from_environment(PrometheusMetricsSink(), {})
    assert (server.address, server.port) == (":9480", 9480)
    assert not 9092 <= server.port <= 9094


def test_a_taken_port_is_a_clear_error_naming_the_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = MetricsServer(PrometheusMetricsSink(), f"127.0.0.1:{port}")
        with pytest.raises(MetricsServerError, match=METRICS_ADDR_ENV):
            server.start()


# -- samples ------------------------------------------------------------------------------------------


def test_a_sample_must_carry_exactly_its_metrics_labels() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        Sample(RECORDS, 1, {"topic": TOPIC})
    with pytest.raises(ValueError, match="empty value"):
        sample(RECORDS, 1, topic=TOPIC, result="")
    with pytest.raises(ValueError, match="cannot go down"):
        sample(ERRORS, -1, stage="sink")
    with pytest.raises(ValueError, match="not a valid ErrorStage"):
        record_error(PrometheusMetricsSink(), "parse")


def test_queue_to_start_needs_the_segments_landing_times() -> None:
    plan = _plan()
    assert queue_to_start_seconds(plan, _result()) == 15
    bare = plan.model_copy(
        update={
            "partitions": tuple(
                p.model_copy(
                    update={
                        "segments": tuple(s.model_copy(update={"last_modified_ms": None}) for s in p.segments)
                    }
                )
                for p in plan.partitions
            )
        }
    )
    assert queue_to_start_seconds(bare, _result()) is None


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_metrics_module_loads_no_heavy_or_optional_library() -> None:
    code = (
        "import sys, kafscale_iceberg.metrics; print(sorted(m for m in ('pyarrow', 'pyiceberg', 'pyspark', "
        "'numpy', 'prometheus_client', 'aws_lambda_powertools', 'boto3') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


# -- EMF ----------------------------------------------------------------------------------------------


def _dimensions(record: dict[str, Any]) -> list[list[str]]:
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == EMF_NAMESPACE
    dimensions: list[list[str]] = directive["Dimensions"]
    return dimensions


def _metric_names(record: dict[str, Any]) -> dict[str, str]:
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    return {m["Name"]: m["Unit"] for m in directive["Metrics"]}


def _record_with(records: list[dict[str, Any]], metric: str, **properties: Any) -> dict[str, Any]:
    (record,) = [
        r for r in records if metric in _metric_names(r) and all(r.get(k) == v for k, v in properties.items())
    ]
    return record


def test_a_commit_as_emf_topic_a_dimension_only_of_per_topic_metrics_partition_a_property(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 33: every dimension value combination is a billed CloudWatch metric, so `topic` is a
    dimension only of the per-topic metrics, and labels without a fixed set of values (partition,
    column, reason) are properties of the record - still in it, for Logs Insights."""
    sink = EmfMetricsSink(Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE))
    _commit(sink)
    sink.flush()
    records = emf_records(capsys.readouterr().out)
    per_topic = {m.name for m in ALL_METRICS if m.per_topic}
    assert per_topic == {"consecutive_failures", "dead_letters_total", "watermark_age_seconds"}
    for record in records:
        (dimension_names,) = _dimensions(record)
        assert dimension_names[-1] == "service"
        assert record["service"] == EMF_SERVICE
        assert not {"partition", "column", "reason"} & set(dimension_names), record
        assert ("topic" in dimension_names) == (set(_metric_names(record)) <= per_topic), record
        assert record["topic"] == TOPIC  # a property where it is not a dimension

    written = _record_with(records, "records_total", result="written")
    assert written["records_total"] == [25.0]
    assert _dimensions(written) == [["result", "service"]]
    batches = _record_with(records, "batches_total")
    assert batches["batches_total"] == [3.0]
    assert batches["write_latency_ms"] == [8750.0]
    assert batches["queue_to_start_latency_seconds"] == [15.0]
    assert _metric_names(batches)["write_latency_ms"] == "Milliseconds"
    per_topic_record = _record_with(records, "consecutive_failures")
    assert per_topic_record["consecutive_failures"] == [0.0]
    assert per_topic_record["watermark_age_seconds"][0] > 0
    assert _dimensions(per_topic_record) == [["topic", "service"]]
    committed = _record_with(records, "runs_total", outcome="committed")
    assert committed["runs_total"] == [1.0]
    assert committed["run_duration_seconds"] == [14.25]
    partition_one = _record_with(records, "last_offset", partition=1)
    assert partition_one["last_offset"] == [29.0]
    assert partition_one["watermark_offset"] == [29.0]
    assert partition_one["watermark_timestamp_ms"] == [8000.0]
    conversion = _record_with(records, "conversion_failures_total", column="at")
    assert conversion["conversion_failures_total"] == [2.0]
    undecodable = _record_with(records, "dead_letters_total", reason="undecodable")
    assert undecodable["dead_letters_total"] == [2.0]
    assert _dimensions(undecodable) == [["topic", "service"]]


def test_emf_leaves_metrics_added_before_it_with_their_own_dimensions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = Metrics(namespace=EMF_NAMESPACE, service="launcher")
    metrics.add_dimension(name="custom", value="x")
    metrics.add_metric(name="handler_metric", unit="Count", value=1)
    sink = EmfMetricsSink(metrics)
    record_error(sink, "launch")
    sink.flush()
    first, second = emf_records(capsys.readouterr().out)
    assert _dimensions(first) == [["custom", "service"]]
    assert first["handler_metric"] == [1.0]
    assert _dimensions(second) == [["stage", "service"]]
    assert (second["stage"], second["errors_total"]) == ("launch", [1.0])
    assert "custom" not in second


def test_emf_keeps_the_last_record_for_log_metrics_to_print(capsys: pytest.CaptureFixture[str]) -> None:
    metrics = Metrics(namespace=EMF_NAMESPACE, service="steps")

    @metrics.log_metrics
    def handler(event: dict[str, Any], context: object) -> None:
        record_abort(EmfMetricsSink(metrics), TOPIC, 3)

    handler({}, None)
    records = emf_records(capsys.readouterr().out)
    values = {name: record[name] for record in records for name in _metric_names(record)}
    assert values == {"runs_total": [1.0], "consecutive_failures": [3.0], "errors_total": [1.0]}


def test_offset_gaps_are_counted_per_partition_and_healthz_reports_not_ready_with_the_reason(
    served: tuple[PrometheusMetricsSink, MetricsServer],
) -> None:
    """Issue 12 §6 (gaps were only in result.json) and §2 (`/healthz` says why it cannot work)."""
    from kafscale_iceberg.domain.runs import OffsetGap

    sink, server = served
    result = _result()
    first = result.partitions[0].model_copy(
        update={"gaps": (OffsetGap(first=3, last=5), OffsetGap(first=9, last=9))}
    )
    result = result.model_copy(update={"partitions": (first, *result.partitions[1:])})
    record_commit(sink, _plan(), result, _outcome(newly=True), started_at=1013.0, ended_at=1014.25)
    scraped = _scrape(server.port)
    assert scraped[_key("offset_gaps_total", topic=TOPIC, partition=str(first.partition))] == 4

    server.readiness.not_ready("CheckpointUnavailableError: etcd down")
    assert _get(server.port, "/healthz")[0::2] == (503, "not ready: CheckpointUnavailableError: etcd down\n")
    server.readiness.ready()
    assert _get(server.port, "/healthz")[0::2] == (200, "ok")


def test_metrics_are_emitted_only_through_the_defined_metrics() -> None:
    """No handler or module names a metric itself: every emission is a `Sample` of `ALL_METRICS`,
    and only the EMF sink calls Powertools' `add_metric`."""
    root = Path(__file__).resolve().parent.parent
    callers = sorted(
        str(path.relative_to(root))
        for folder in ("functions", "kafscale_iceberg")
        for path in (root / folder).rglob("*.py")
        if ".add_metric(" in path.read_text()
    )
    assert callers == ["kafscale_iceberg/metrics/emf.py"]
