"""A real SIGKILL of `redrive` at each of its steps, then a second `redrive`: each dead letter lands once.

The child builds the product's redrive from the fixed config with the real adapters, wrapping one of
them so that the step's call SIGKILLs its own process first: nothing after it runs (no `finally`, no
lease release), as when the kernel kills the process. The steps: before the table's append (lease
held, rows read and converted), before the dead-letter commit (the rows landed), before the lease is
released (everything committed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kafscale_iceberg.exceptions import RedriveLeaseBusyError
from tests.support.dying import expire_dead_lease
from tests.support.moto import MotoEndpoint
from tests.test_redrive import ALL, BAD, DLQ, TABLE, TOPIC, RedriveWorld

pytestmark = pytest.mark.slow

CHILD = """
import os, signal, sys
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_dead_letters import IcebergDeadLetters
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import load_config_from
from kafscale_iceberg.dataplane.redrive import convert_dead_letters
from kafscale_iceberg.domain.redrive import RedriveSelection
from kafscale_iceberg.services.redrive import RedriveService

step = sys.argv[2]

class KilledAt:
    def __init__(self, inner):
        self._inner = inner
    def __getattr__(self, name):
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)
        return getattr(self._inner, name)

config = load_config_from(sys.argv[1])
assembly = Assembly(config, owner_id="doomed")
dead_letters = IcebergDeadLetters(load_iceberg_catalog(CatalogSettings.from_config(config)))
service = RedriveService(
    config,
    KilledAt(assembly.checkpoints),
    KilledAt(dead_letters),
    convert_dead_letters,
    assembly.tables,
    owner_id="doomed",
)
service.redrive("orders", RedriveSelection())
print("not killed", flush=True)
"""

LEASE_TTL_S = 60
"""Long, so no step outlasts it on a loaded machine; the killed child's lease is expired by the test."""


def _expire_dead_lease(world: RedriveWorld) -> None:
    """The lease the killed child left (a busy topic until it expires) runs out now
    (`tests/support/dying.py`)."""
    with pytest.raises(RedriveLeaseBusyError, match="doomed"):
        world.redrive()
    assert expire_dead_lease(world.config("long"), TOPIC)  # the child died holding it


@pytest.mark.parametrize("step", ["land_redriven", "resolve_dead_letters", "release_lease"])
def test_a_redrive_killed_at_each_step_then_run_again_lands_each_dead_letter_once(
    moto_server: MotoEndpoint, tmp_path: Path, step: str
) -> None:
    world = RedriveWorld(moto_server, tmp_path, offsets={"lease_ttl_seconds": LEASE_TTL_S})
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(world.document("long")))

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), step],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert child.returncode == -9, child.stdout + child.stderr
    landed_by_child = world.pairs(TABLE) - (ALL - BAD)

    _expire_dead_lease(world)
    second = world.redrive()
    third = world.redrive()

    assert landed_by_child == (Counter() if step == "land_redriven" else BAD)
    assert world.pairs(TABLE) == ALL  # each of the 1,000 once
    assert world.pairs(DLQ) == Counter()
    landed_second = sum(m.total_landed for m in second.mappings)
    assert landed_second == (100 if step == "land_redriven" else 0)
    assert [(m.landed, m.already_landed) for m in third.mappings] == [({}, {})]
