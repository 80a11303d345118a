"""`redrive` on real parts: segments in a moto S3, the one-machine pipeline with the inline runner, the
SQLite checkpoint store and a SQLite catalog. A mapping whose `qty` column is `int` dead-letters the 100
of 1,000 records whose quantity does not fit; the column is made `long`; `redrive` lands exactly them,
once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_dead_letters import IcebergDeadLetters
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.cli import main
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.dataplane.redrive import convert_dead_letters
from kafscale_iceberg.domain.redrive import SUMMARY_REDRIVEN, RedriveSelection, decode_pairs
from kafscale_iceberg.exceptions import RedriveRefusedError
from kafscale_iceberg.local.wiring import open_pipeline
from kafscale_iceberg.services.redrive import RedriveReport, RedriveService
from tests.support.config_documents import local_document
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

TOPIC, TABLE, DLQ = "orders", "shop.orders", "shop.orders__dlq"
PARTITIONS = {0: 600, 1: 400}
"""1,000 records in two partitions."""
BIG = 3_000_000_000
"""A quantity no `int` holds."""


def _bad(partition: int, offset: int) -> bool:
    """The 100 records whose quantity does not fit an int: every 10th."""
    return offset % 10 == 3


def _qty(partition: int, offset: int) -> int:
    return BIG + offset if _bad(partition, offset) else offset


class RedriveWorld:
    """1,000 records ingested with `qty: int`; 100 of them in the dead-letter table."""

    def __init__(self, moto: MotoEndpoint, root: Path, **sections: dict[str, Any]) -> None:
        self.root = root
        # A long lease: no step between two renewals outlasts it on a loaded machine.
        self.sections = {"offsets": {"lease_ttl_seconds": 60}, **sections}
        self.bucket = moto.new_bucket()
        self.moto = moto
        s3: Any = moto.client("s3")
        for partition, count in PARTITIONS.items():
            values = [json.dumps({"id": o, "qty": _qty(partition, o)}).encode() for o in range(count)]
            put_segment(s3, self.bucket, "prod", TOPIC, partition, 0, count, values=values, batch_size=50)
        with open_pipeline(self.config("int")) as pipeline:
            outcome = pipeline.run_once()
        assert outcome.ok, outcome.failed
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config("int")))

    def document(self, qty_type: str) -> dict[str, Any]:
        return local_document(
            self.root,
            self.moto,
            bucket=self.bucket,
            namespace="prod",
            runner={"type": "inline", "inline": {"workers": 2}},
            **self.sections,
            mappings=[
                {
                    "topic": TOPIC,
                    "table": TABLE,
                    "dead_letter_table": DLQ,
                    "create_table_if_missing": True,
                    "schema": {
                        "columns": [
                            {"name": "id", "type": "long", "required": True},
                            {"name": "qty", "type": qty_type, "required": True},
                        ],
                        "allow_type_widening": True,
                    },
                }
            ],
        )

    def config(self, qty_type: str) -> KafscaleConfig:
        return config_from_mapping(self.document(qty_type), source="test")

    def redrive(self, selection: RedriveSelection | None = None, *, dry_run: bool = False) -> RedriveReport:
        assembly = Assembly(self.config("long"))
        return assembly.redrive.redrive(TOPIC, selection or RedriveSelection(), dry_run=dry_run)

    def rows(self, table: str) -> pa.Table:
        return self.catalog.load_table(table).scan().to_arrow()

    def pairs(self, table: str) -> Counter[tuple[int, int]]:
        rows = self.rows(table)
        return Counter(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True))


ALL = Counter((p, o) for p, count in PARTITIONS.items() for o in range(count))
BAD = Counter(pair for pair in ALL if _bad(*pair))


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path) -> RedriveWorld:
    world = RedriveWorld(moto_server, tmp_path)
    assert world.pairs(DLQ) == BAD  # the premise: exactly the 100 dead-lettered, by the column's type
    assert set(world.rows(DLQ)["error_kind"].to_pylist()) == {"required_column"}
    return world


def test_after_the_fix_redrive_lands_exactly_the_dead_letters_once(world: RedriveWorld) -> None:
    dry = world.redrive(dry_run=True)
    assert world.pairs(DLQ) == BAD  # a dry run changes nothing

    report = world.redrive()
    again = world.redrive()

    assert [m.landed for m in dry.mappings] == [{"required_column": 100}]
    assert [m.landed for m in report.mappings] == [{"required_column": 100}]
    assert [(m.landed, m.already_landed, m.still_failing) for m in again.mappings] == [({}, {}, {})]
    assert world.pairs(TABLE) == ALL
    assert world.pairs(DLQ) == Counter()
    rows = world.rows(TABLE)
    landed = {
        (p, o): q
        for p, o, q in zip(*(rows[c].to_pylist() for c in ("partition", "offset", "qty")), strict=True)
    }
    assert all(landed[pair] == _qty(*pair) for pair in ALL)
    summaries = [
        s.summary for s in world.catalog.load_table(TABLE).metadata.snapshots if s.summary is not None
    ]
    redriven = [decode_pairs(s.get(SUMMARY_REDRIVEN) or "") for s in summaries if s.get(SUMMARY_REDRIVEN)]
    assert redriven == [set(BAD)]


def test_before_the_fix_the_dead_letters_stay_with_their_reason_and_nothing_lands(
    world: RedriveWorld,
) -> None:
    report = Assembly(world.config("int")).redrive.redrive(TOPIC, RedriveSelection())

    assert [(m.landed, m.still_failing) for m in report.mappings] == [({}, {"required_column": 100})]
    assert world.pairs(TABLE) == ALL - BAD
    assert world.pairs(DLQ) == BAD
    assert set(world.rows(DLQ)["run_id"].to_pylist()) == {report_id(world)}


def report_id(world: RedriveWorld) -> str:
    """The run id the rewritten dead letters carry: the redrive's."""
    (run_id,) = set(world.rows(DLQ)["run_id"].to_pylist())
    assert run_id.startswith(f"redrive-{TOPIC}-")
    return str(run_id)


def test_a_selection_lands_only_its_dead_letters(world: RedriveWorld) -> None:
    selection = RedriveSelection(reason="required_column", partition=1, from_offset=100, to_offset=199)

    report = world.redrive(selection)

    chosen = Counter(pair for pair in BAD if pair[0] == 1 and 100 <= pair[1] <= 199)
    assert [m.landed for m in report.mappings] == [{"required_column": 10}]
    assert world.pairs(TABLE) == ALL - BAD + chosen
    assert world.pairs(DLQ) == BAD - chosen


class _CrashError(Exception):
    """The process stopping at a step (in-process; `test_redrive_sigkill.py` kills a real one)."""


class CrashAt:
    """A real adapter whose `step` method raises instead of running (and every call after it)."""

    def __init__(self, inner: Any, step: str) -> None:
        self._inner = inner
        self._step = step

    def __getattr__(self, name: str) -> Any:
        if name == self._step:
            raise _CrashError(name)
        return getattr(self._inner, name)


def crashing_service(world: RedriveWorld, step: str) -> RedriveService:
    """The product's redrive over the real adapters, one of them stopping at `step`."""
    config = world.config("long")
    assembly = Assembly(config, owner_id="crashing")
    dead_letters = IcebergDeadLetters(load_iceberg_catalog(CatalogSettings.from_config(config)))
    return RedriveService(
        config,
        CrashAt(assembly.checkpoints, step),
        CrashAt(dead_letters, step),
        convert_dead_letters,
        assembly.tables,
        owner_id="crashing",
    )


@pytest.mark.parametrize("step", ["land_redriven", "resolve_dead_letters"])
def test_a_redrive_stopped_at_a_step_is_finished_by_the_next_without_landing_twice(
    world: RedriveWorld, step: str
) -> None:
    with pytest.raises(_CrashError):
        crashing_service(world, step).redrive(TOPIC, RedriveSelection())
    landed_first = world.pairs(TABLE) - (ALL - BAD)

    report = world.redrive()

    assert landed_first == (Counter() if step == "land_redriven" else BAD)
    expected = ({"required_column": 100}, {}) if step == "land_redriven" else ({}, {"required_column": 100})
    assert [(m.landed, m.already_landed) for m in report.mappings] == [expected]
    assert world.pairs(TABLE) == ALL
    assert world.pairs(DLQ) == Counter()


def test_the_command_prints_the_counts_per_reason_and_a_dry_run_changes_nothing(
    world: RedriveWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    path = world.root / "fixed.json"
    path.write_text(json.dumps(world.document("long")))

    assert main(["redrive", "--config", str(path), "--topic", TOPIC, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert main(["redrive", "--config", str(path), "--topic", TOPIC, "--json"]) == 0
    done = json.loads(capsys.readouterr().out)

    assert "would land      100 (required_column 100)" in dry
    assert done["mappings"][0]["landed"] == {"required_column": 100}
    assert world.pairs(TABLE) == ALL


def test_a_routed_or_upsert_mapping_is_refused_before_anything_is_read(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    document = local_document(
        tmp_path,
        moto_server,
        bucket="unused",
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "mode": "upsert",
                "upsert": {"key": ["id"]},
                "schema": {"columns": [{"name": "id", "type": "long", "required": True}]},
            }
        ],
    )
    service = Assembly(config_from_mapping(document, source="test")).redrive

    with pytest.raises(RedriveRefusedError, match=r"topic 'orders' into 'shop.orders': .*upsert"):
        service.redrive(TOPIC, RedriveSelection())
