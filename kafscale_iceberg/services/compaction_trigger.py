"""The small-file trigger: compaction when a table has gathered files, not only on the schedule.

After each run's commit, `SmallFileTrigger.due(topic, states)` compares the topic's table's data
files now with the files it had when maintenance last passed (`kafscale.maintenance.files-baseline`,
set by every pass after its compaction): more than `maintenance.trigger_small_files` new files -
each run adds small ones - and a maintenance pass of that topic starts now (`MaintenanceTrigger`):
on AWS the commit function invokes the MaintenanceFunction asynchronously (it plans and launches the
EMR compaction job), on one machine `run`'s schedule runs the pass after the loop's current step.
The check reads nothing: both counts are in the table state the commit step committed (or found the
run in) and returns (`CommitOutcome.states`; the snapshot summary's `total-data-files` and the
table's properties). `trigger_small_files: 0` leaves compaction to the schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.commits import TableState
from kafscale_iceberg.domain.routing import matches_template

logger = logging.getLogger(__name__)


class SmallFileTrigger:
    """Whether a topic's table has gathered enough new files for a compaction now."""

    def __init__(self, config: KafscaleConfig) -> None:
        self._config = config

    def due(self, topic: str, states: Mapping[str, TableState]) -> bool:
        """True when one of `topic`'s data tables, as `states` (a commit's `CommitOutcome.states`)
        hold it, has more than `maintenance.trigger_small_files` files added since maintenance last
        passed: its mappings' tables, and a route template's tables the commit wrote. False when the
        trigger is off, the topic unmapped or none of its data tables in `states`."""
        threshold = self._config.maintenance.trigger_small_files
        mappings = self._config.mappings_for(topic)
        if threshold <= 0 or not mappings or not self._config.maintenance.enabled:
            return False
        named = {t for m in mappings for t in m.data_tables}
        templates = [
            m.route.table_template for m in mappings if m.route is not None and m.route.table_template
        ]
        others = self._config.named_tables - named  # dead letters, other mappings' tables

        def data_table(table: str) -> bool:
            if table in named:
                return True
            return table not in others and any(matches_template(t, table) for t in templates)

        return any(
            state.data_files - state.files_baseline > threshold
            for table, state in states.items()
            if data_table(table)
        )


class MaintenanceTrigger:
    """After a commit: start a maintenance pass of the topic when `SmallFileTrigger` says so.

    `start(topic)` starts the pass (an asynchronous Lambda invoke on AWS, the `run` schedule on one
    machine). Never raises: a failed check or start is logged, and the schedule still comes.
    """

    def __init__(self, trigger: SmallFileTrigger, start: Callable[[str], None]) -> None:
        self._trigger = trigger
        self._start = start

    def after_commit(self, topic: str, states: Mapping[str, TableState]) -> bool:
        """Check `topic` against the commit's `states` and start its pass when due; True when started."""
        try:
            if not self._trigger.due(topic, states):
                return False
            self._start(topic)
        except Exception as exc:  # maintenance must never fail a commit
            logger.warning(
                "small-file trigger failed; the scheduled pass compacts instead",
                extra={"topic": topic, "problem": f"{type(exc).__name__}: {exc}"},
            )
            return False
        logger.info("small-file trigger: maintenance pass started", extra={"topic": topic})
        return True
