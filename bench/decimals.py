"""Exact decimal columns against double ones: the pyarrow pipeline, same segments, same run.

Run with `python -m bench.decimals` (or `make bench-decimals`). Workload: the pizza-order events of
`bench.spark` (~280 bytes per record), 4 partitions; the mapping of `bench.spark` with its `total`
column (a JSON number with two fraction digits) as `double` (the baseline) and as `decimal(10,2)`
(read from the number's exact text by the compiled scanner, `domain/decimals.fit_decimal`), sampled
interleaved over `--rounds` rounds, best run kept (other load on a shared machine is bursty). Both
runs are `run_task` over every segment in this process, no Spark: fetch, decode, convert, Parquet.

The last line is one JSON object: `decimal_vs_double` (end to end) and `decimal_vs_double_convert`
(the convert stage alone), and each configuration's seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.spark import make_workload, pipeline_runner, timed
from bench.workload import Workload
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.segments.layout import Codec

EXACT_TOTAL = ColumnSpec(name="total", type=ColumnType.DECIMAL, precision=10, scale=2)


def with_decimal_total(workload: Workload) -> Workload:
    """The same workload with its `total` column as `decimal(10,2)`, written to its own folder."""
    plan = workload.plan
    columns = tuple(EXACT_TOTAL if c.name == "total" else c for c in plan.conversion.columns)
    assert plan.table is not None
    out = Path(plan.table.data_uri).parent / "decimal"
    plan = plan.model_copy(
        update={
            "conversion": plan.conversion.model_copy(update={"columns": columns}),
            "table": plan.table.model_copy(update={"data_uri": str(out / "data")}),
            "dead_letter_table": plan.dead_letter_table.model_copy(update={"data_uri": str(out / "dl")}),
        }
    )
    return replace(workload, plan=plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--segments", type=int, default=2, help="segments per partition (20,000 records each)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-decimals-") as folder:
        started = time.perf_counter()
        double = make_workload(
            Path(folder), partitions=args.partitions, segments=args.segments, codec=Codec.NONE
        )
        print(
            f"{double.records:,} records ({double.megabytes:.1f} MB), generated in "
            f"{time.perf_counter() - started:.1f} s"
        )
        runs = {"double": double, "decimal": with_decimal_total(double)}
        converts: dict[str, list[float]] = {name: [] for name in runs}
        runners = {name: pipeline_runner(w, converts[name])[0] for name, w in runs.items()}
        for name in runs:
            converts[name].clear()  # the warm-up run's
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runners.items():
                seconds[name].append(timed(run))
    best = {name: min(values) for name, values in seconds.items()}
    convert = {name: min(values) for name, values in converts.items()}
    for name in runs:
        print(
            f"pyarrow pipeline, total as {name:8s} {best[name]:6.2f} s "
            f"{double.records / best[name]:10,.0f} rec/s   convert {convert[name]:5.2f} s"
        )
    print(
        json.dumps(
            {
                "decimal_vs_double": round(best["decimal"] / best["double"], 2),
                "decimal_vs_double_convert": round(convert["decimal"] / convert["double"], 2),
                "seconds": {k: round(v, 2) for k, v in best.items()},
                "convert_s": {k: round(v, 3) for k, v in convert.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
