"""What a segment and a run cost in requests along the AWS path, counted in the AWS box.

S3 event → router → work queue → launcher → plan → run → commit, for two runs of one topic (a small
and a larger one, each routed in one batch): every S3 request moto receives while the stack works
(functions, the EMR job's driver and workers, pyiceberg's table metadata), every SQS request (the S3
notifications, the event sources' receives and deletes under their function's role, the functions'
and the state machine's sends), every Lambda invocation and every Step Functions state transition.
The two runs give each count's part per run and per segment (`per_segment`), which `make bench-cost`
prices (it runs this test with `KAFSCALE_BOX_COUNTS` naming the file to write). S3 requests are also
counted by the role that made them (`CallRecorder.s3_requests_by_role`), so a segment read twice
shows which step reads it.

The lease renewals are counted apart (`renewals`: their Watch invocations, S3 requests and state
transitions): the box runs Wait states at `TIME_SCALE` but the job at this machine's speed, so how
many renewals a run makes here says how loaded the machine was, not what the run costs (on AWS one
per 180 s of a run: bench/cost_model.py counts them from the run's modelled time).

Not counted here (bench/cost.py models them, per month): the event sources' empty long polls, the
reconciler's schedule. The box routes all of a run's notifications in one batch; on AWS a run's
segments arrive over several router batches (bench/cost.py adds each further batch's requests).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.cost.measured import artefact_digests
from kafscale_iceberg.cost.stack import read_stack
from tests.support.aws_box import EMR_JOB_ROLE, Box, SparkBoxOpener
from tests.support.lambdas import emf_records
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "clicks"
TABLE = "shop.clicks"
PARTITIONS = 2
SMALL_RUN, LARGE_RUN = 4, 24  # segments
RECORDS_PER_SEGMENT = 5
RENEWAL_ROLE = "WatchRole"  # the Renew step's function
RENEWAL_STATES = {"Renew", "LeaseHeld?"}  # a renewal's states, besides RenewEvery


@dataclass(frozen=True)
class PathCounts:
    """Requests of one committed run of `segments` segments, by service."""

    segments: int
    s3_get: int
    s3_put: int
    s3_list: int
    sqs_standard: int
    sqs_fifo: int
    lambda_invocations: dict[str, int]
    sfn_transitions: int
    s3_get_by_role: dict[str, int]
    renewals: dict[str, int]
    """The lease renewals' own counts (not in the others): `renewals`, `s3_get`, `sfn_transitions`."""
    seconds: dict[str, float]
    """Each function's invocations' time here, summed (this machine's, not Lambda's: for reference)."""

    @property
    def s3(self) -> int:
        return self.s3_get + self.s3_put + self.s3_list

    @property
    def sqs(self) -> int:
        return self.sqs_standard + self.sqs_fifo


def _directive(record: dict[str, Any]) -> dict[str, Any]:
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    return dict(directive)


def per_segment(small: PathCounts, large: PathCounts) -> dict[str, dict[str, float]]:
    """Each count as `fixed + per_segment * segments` (two runs, one line)."""
    span = large.segments - small.segments
    fields = ("s3_get", "s3_put", "s3_list", "sqs_standard", "sqs_fifo", "sfn_transitions")
    result: dict[str, dict[str, float]] = {}
    for name in fields:
        slope = (getattr(large, name) - getattr(small, name)) / span
        result[name] = {"per_run": getattr(small, name) - slope * small.segments, "per_segment": slope}
    for function in sorted(set(small.lambda_invocations) | set(large.lambda_invocations)):
        a, b = small.lambda_invocations.get(function, 0), large.lambda_invocations.get(function, 0)
        slope = (b - a) / span
        result[f"lambda:{function}"] = {"per_run": a - slope * small.segments, "per_segment": slope}
    for role in sorted(set(small.s3_get_by_role) | set(large.s3_get_by_role)):
        a, b = small.s3_get_by_role.get(role, 0), large.s3_get_by_role.get(role, 0)
        slope = (b - a) / span
        result[f"s3_get:{role}"] = {"per_run": a - slope * small.segments, "per_segment": slope}
    return result


def per_renewal(runs: list[PathCounts]) -> dict[str, float]:
    """What one lease renewal costs (the runs' renewals together; none when no run renewed)."""
    renewals = sum(r.renewals["renewals"] for r in runs)
    if not renewals:
        return {}
    return {k: sum(r.renewals[k] for r in runs) / renewals for k in ("s3_get", "sfn_transitions")}


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}],
    ) as opened:
        yield opened


def _snapshot(box: Box) -> dict[str, Any]:
    recorder = box.recorder
    queues = {box.queue_urls[name].rsplit("/", 1)[1]: name for name in box.queue_urls}
    return {
        "s3": dict(recorder.s3_requests_seen),
        "s3_by_role": dict(recorder.s3_requests_by_role),
        "sqs": {key: count for key, count in recorder.requests.items() if key.startswith("sqs:")},
        "sqs_by_queue": _sqs_by_queue(box, queues),
        "notifications": box.mappings.first_deliveries["RouterFunction"],
        "invocations": [i.function for i in box.fleet.invocations],
        "executions": {e["executionArn"] for e in box.executions()},
    }


def _sqs_by_queue(box: Box, queues: dict[str, str]) -> dict[str, int]:
    """SQS requests per queue kind (standard: the segment events queue; FIFO: the work queue)."""
    counts = {"standard": 0, "fifo": 0}
    for call in box.recorder.calls:
        if not call.action.startswith("sqs:"):
            continue
        name = queues.get(call.resource.rsplit(":", 1)[1], "")
        counts["fifo" if name == "WorkQueue" else "standard"] += 1
    return counts


def _run(box: Box, segments: int, first_offset: int) -> PathCounts:
    """Put `segments` segments (over the partitions) at once, let the stack commit them, and count."""
    per_partition = segments // PARTITIONS
    for partition in range(PARTITIONS):
        for index in range(per_partition):
            base = first_offset + index * RECORDS_PER_SEGMENT
            put_segment(
                box.s3, box.segment_bucket, box.namespace, TOPIC, partition, base, RECORDS_PER_SEGMENT
            )
    before = _snapshot(box)
    box.pump(timeout_s=400)
    after = _snapshot(box)
    new_executions = after["executions"] - before["executions"]
    entered = {
        arn: [
            event["stateEnteredEventDetails"]["name"]
            for event in box.history(arn)
            if event["type"].endswith("StateEntered")
        ]
        for arn in new_executions
    }
    transitions = sum(len(names) for names in entered.values())
    renewed = sum(names.count("Renew") for names in entered.values())
    # A renewal enters Renew, LeaseHeld? and RenewEvery again (the run's first RenewEvery is the run's;
    # the job's end may cut the last renewal short).
    renewal_transitions = sum(
        sum(1 for name in names if name in RENEWAL_STATES) + max(0, names.count("RenewEvery") - 1)
        for names in entered.values()
    )
    invoked = after["invocations"][len(before["invocations"]) :]
    timed = box.fleet.invocations[len(before["invocations"]) :]
    sqs_calls = {k: after["sqs_by_queue"][k] - before["sqs_by_queue"][k] for k in ("standard", "fifo")}
    # The recorder counts IAM actions (a batch call once per entry): price SQS by the requests instead,
    # split between the queues in the same proportion.
    requests = sum(after["sqs"].values()) - sum(before["sqs"].values())
    actions = sqs_calls["standard"] + sqs_calls["fifo"]
    fifo = round(requests * sqs_calls["fifo"] / actions) if actions else 0
    notifications = after["notifications"] - before["notifications"]
    by_role = {
        key: count - before["s3_by_role"].get(key, 0)
        for key, count in after["s3_by_role"].items()
        if count > before["s3_by_role"].get(key, 0)
    }
    renewal_s3 = {k: by_role.get((RENEWAL_ROLE, k), 0) for k in ("GET", "PUT", "LIST")}
    s3 = {k: after["s3"].get(k, 0) - before["s3"].get(k, 0) - renewal_s3[k] for k in ("GET", "PUT", "LIST")}
    return PathCounts(
        segments=segments,
        s3_get=s3["GET"],
        s3_put=s3["PUT"],
        s3_list=s3["LIST"],
        sqs_standard=requests - fifo + notifications,
        sqs_fifo=fifo,
        lambda_invocations={f: invoked.count(f) for f in sorted(set(invoked)) if f != "WatchFunction"},
        sfn_transitions=transitions - renewal_transitions,
        s3_get_by_role={
            role: n for (role, kind), n in sorted(by_role.items()) if kind == "GET" and role != RENEWAL_ROLE
        },
        renewals={
            "renewals": renewed,
            "s3_get": renewal_s3["GET"] + renewal_s3["PUT"] + renewal_s3["LIST"],
            "sfn_transitions": renewal_transitions,
        },
        seconds={f: round(sum(i.seconds for i in timed if i.function == f), 3) for f in sorted(set(invoked))},
    )


def test_requests_per_run_and_per_segment_along_the_path_are_counted(
    box: Box, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(box, PARTITIONS, 0)  # the first run creates the table: not what a run costs after it
    after_first = len(box.recorder.calls)
    offset = RECORDS_PER_SEGMENT
    small = _run(box, SMALL_RUN, offset)
    offset += SMALL_RUN // PARTITIONS * RECORDS_PER_SEGMENT
    large = _run(box, LARGE_RUN, offset)
    lines = per_segment(small, large)
    destination = os.environ.get("KAFSCALE_BOX_COUNTS")
    if destination:
        document = {
            "runs": [asdict(small), asdict(large)],
            "lines": lines,
            "renewal": per_renewal([small, large]),
            "measured_on": artefact_digests(),
            # The metrics the stack's functions emitted (EMF on stdout): CloudWatch bills a metric for
            # the hours it receives data, so the cost model prices these, not every definition.
            "emitted_metrics": sorted(
                {m["Name"] for r in emf_records(capsys.readouterr().out) for m in _directive(r)["Metrics"]}
            ),
        }
        Path(destination).write_text(json.dumps(document, indent=1) + "\n")
    total = PARTITIONS + SMALL_RUN + LARGE_RUN
    assert len(box.rows(TABLE)) == total * RECORDS_PER_SEGMENT, box.describe()
    assert [e["status"] for e in box.executions()] == ["SUCCEEDED"] * 3
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))
    # Issue 22's targets, per segment: at most 3 S3 and 1.5 SQS requests (what one more segment adds
    # to a run, its part of the run's fixed requests being bench-cost's to report).
    s3 = sum(lines[k]["per_segment"] for k in ("s3_get", "s3_put", "s3_list"))
    sqs = sum(lines[k]["per_segment"] for k in ("sqs_standard", "sqs_fifo"))
    assert s3 <= 3.0, lines
    assert sqs <= 1.5, lines
    # Where they go: one S3 notification (the .index), the router's ranged GET of the footer, the
    # job's read of the .kfs (each segment read once by each); the queue's receive and delete shared
    # by up to 10 messages. One work item per topic per router batch: nothing on the FIFO queue grows
    # with the segments, nor do the run's documents and LISTs, nor any other role's reads.
    readers = {k.split(":", 1)[1]: v["per_segment"] for k, v in lines.items() if k.startswith("s3_get:")}
    assert readers.pop("RouterRole") == pytest.approx(1.0, abs=0.1), lines
    assert readers.pop(EMR_JOB_ROLE) == pytest.approx(1.0, abs=0.1), lines
    assert all(abs(slope) < 0.1 for slope in readers.values()), readers
    assert lines["s3_put"]["per_segment"] == pytest.approx(0.0, abs=0.1), lines
    # The commit step writes `field-ids.json` only when the tables' ids change: the first run's commit
    # wrote it, and neither later run changed a column (no PUT per run).
    rewritten = [
        c
        for c in box.recorder.calls[after_first:]
        if c.action == "s3:PutObject" and c.resource.endswith("/field-ids.json")
    ]
    assert rewritten == [], rewritten
    assert lines["s3_list"]["per_segment"] == pytest.approx(0.0, abs=0.1), lines
    assert 1.0 <= lines["sqs_standard"]["per_segment"] <= 1.3, lines
    assert lines["sqs_fifo"]["per_segment"] == pytest.approx(0.0, abs=0.1), lines
    # The state machine's transitions are per run (lease renewals apart, counted by the run's time), as
    # many as the cost model counts on the committed path of the definition the stack deploys.
    assert lines["sfn_transitions"]["per_segment"] == pytest.approx(0.0, abs=0.01), lines
    assert lines["sfn_transitions"]["per_run"] == pytest.approx(
        read_stack().state_machine.transitions_per_run, abs=0.01
    ), lines
    # Per run, the launcher lists the topic's partitions and each partition once, twice: the launch,
    # and the launch the signal after the commit asks for, which finds the partitions idle at the
    # ends the signal names (no probing back for the segment holding them, no footer read).
    assert lines["s3_list"]["per_run"] == pytest.approx(2 * (1 + PARTITIONS), abs=0.1), lines
