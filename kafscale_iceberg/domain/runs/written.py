"""A run's plan and result read together: the tables as written, in commit order."""

from __future__ import annotations

from kafscale_iceberg.domain.runs.plan import MappingPlan, RunPlan, TableRole
from kafscale_iceberg.domain.runs.result import RunResult, TableOutput


def plan_as_written(plan: RunPlan, result: RunResult) -> RunPlan:
    """`plan` with the columns and field ids its data files were written with: an inferred table's
    (`RunResult.columns`, `.field_ids` for a run of one table; each `TableOutput`'s in a run of
    several), decided by the job; `plan` itself when nothing is inferred."""
    if not plan.infers:
        return plan
    if not plan.multi_table:
        if result.columns is None:
            return plan
        return plan.model_copy(
            update={
                "conversion": plan.conversion.model_copy(update={"columns": result.columns}),
                "table": plan.table.model_copy(update={"field_ids": result.field_ids})
                if plan.table
                else None,
            }
        )
    mappings = list(plan.mappings)
    for output in result.tables:
        if output.columns is None or output.mapping >= len(mappings):
            continue
        mappings[output.mapping] = written_mapping(mappings[output.mapping], output)
    return plan.with_mappings(mappings)


def written_mapping(mapping: MappingPlan, output: TableOutput) -> MappingPlan:
    """`mapping` with `output`'s table as the job wrote it (its columns and field ids)."""
    if not mapping.conversion.infer_columns or output.columns is None:
        return mapping
    ids = output.field_ids
    if mapping.table is not None and mapping.table.identifier == output.identifier:
        return mapping.model_copy(
            update={
                "conversion": mapping.conversion.model_copy(update={"columns": output.columns}),
                "table": mapping.table.model_copy(update={"field_ids": ids}),
            }
        )
    route = mapping.route
    if route is None:
        return mapping
    update = {"columns": output.columns, "field_ids": ids}
    tables = {
        value: t.model_copy(update=update) if t.identifier == output.identifier else t
        for value, t in route.tables.items()
    }
    default = route.default_table
    if default is not None and default.identifier == output.identifier:
        default = default.model_copy(update=update)
    known_columns, known_ids = dict(route.known_columns), dict(route.known_field_ids)
    if output.identifier not in {t.identifier for t in route.static_targets()}:
        known_columns[output.identifier] = output.columns
        if ids is not None:
            known_ids[output.identifier] = ids
    return mapping.model_copy(update={"route": route.resolved(tables, default, known_columns, known_ids)})


def table_outputs(plan: RunPlan, result: RunResult) -> tuple[TableOutput, ...]:
    """Every table of the run with what the run wrote to it, in commit order, the anchor last.

    The order is fixed by the plan: per mapping, its dead-letter table, its template tables (by
    name), the route's `tables` in order and its `default_table`, or its table; then the anchor is
    moved to the end. Tables the plan names are listed even without files (the anchor always commits,
    the others only when they have files). A plan of one fixed table (`multi_table` False) reads its
    files from `data_files` / `dead_letter_files`; any other plan's result lists them in `tables`.
    """
    if not plan.multi_table:
        assert plan.table is not None
        return (
            TableOutput(
                identifier=plan.dead_letter_table.identifier,
                role=TableRole.DEAD_LETTER,
                files=result.dead_letter_files,
                records=sum(o.records_dead_lettered for o in result.partitions),
            ),
            TableOutput(
                identifier=plan.table.identifier,
                role=TableRole.DATA,
                files=result.data_files,
                records=result.counts.written,
                conversion_failures=dict(result.counts.conversion_failures),
            ),
        )
    written = {t.identifier: t for t in result.tables}
    outputs: list[TableOutput] = []
    for index, mapping in enumerate(plan.mappings):
        static = mapping.static_targets()
        names = {t.identifier for t, _ in static}
        dynamic = sorted(
            (t for t in result.tables if t.mapping == index and t.identifier not in names),
            key=lambda t: t.identifier,
        )
        for position, (target, role) in enumerate(static):
            outputs.append(
                written.get(target.identifier)
                or TableOutput(identifier=target.identifier, role=role, mapping=index)
            )
            if position == 0:
                outputs += dynamic
    anchor = next(o for o in outputs if o.identifier == plan.anchor.identifier)
    return (*(o for o in outputs if o is not anchor), anchor)
