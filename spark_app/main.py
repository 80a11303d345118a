"""EMR Serverless entry point: `spark_app/main.py --plan <uri>` (also `spark-submit spark_app/main.py ...`),
or `--compaction <uri>` for a table's compaction job.

Builds the SparkSession, runs `spark_app.job.run_job` (or `spark_app.compaction.run_compaction_job`)
and exits 0 when it succeeded, 1 when it failed (the failed result is written beside the plan or job
either way), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from kafscale_iceberg.adapters.confluent_registry import RegistryCredentials
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.runs import RunStatus
from spark_app.compaction import run_compaction_job
from spark_app.job import build_session, run_job


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the plan, return the process exit code."""
    parser = argparse.ArgumentParser(
        description="Turn a KafScale run plan into Iceberg-ready Parquet files, or compact a table's files."
    )
    work = parser.add_mutually_exclusive_group(required=True)
    work.add_argument("--plan", help="run plan URI: s3://bucket/key, file:///path or a path")
    work.add_argument("--compaction", help="compaction job URI (a maintenance pass wrote it)")
    parser.add_argument("--master", help="Spark master (e.g. local[2]); omit under spark-submit / EMR")
    parser.add_argument("--s3-endpoint-url", help="S3 endpoint for reading the plan (MinIO, moto)")
    parser.add_argument("--s3-region", help="S3 region for reading the plan")
    parser.add_argument("--s3-path-style", action="store_true", help="path-style S3 addressing for the plan")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s3 = S3Settings(endpoint_url=args.s3_endpoint_url, region=args.s3_region, path_style=args.s3_path_style)
    started = time.perf_counter()
    spark = build_session(master=args.master)
    session_start_s = time.perf_counter() - started
    try:
        if args.compaction:
            return 0 if run_compaction_job(spark, args.compaction, s3=s3).succeeded else 1
        result = run_job(
            spark,
            args.plan,
            s3=s3,
            session_start_s=session_start_s,
            registry_credentials=RegistryCredentials.from_environment(os.environ),
        )
    finally:
        spark.stop()
    return 0 if result.status is RunStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
