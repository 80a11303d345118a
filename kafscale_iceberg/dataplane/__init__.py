"""The data plane: decoded segment records -> Iceberg-ready Arrow rows -> Parquet files + a run result.

Pure pyarrow (plus msgspec and jsonschema for record values): no Spark, no SDK. The Spark job in
`spark_app/` only distributes `tasks.run_task` over executors; the pyarrow-only benchmark pipeline
calls the same function in one process. Storage is reached through ports (`ObjectReader`,
`FileSink`, `BlobReader` in `kafscale_iceberg.ports`), implemented in `kafscale_iceberg.adapters`.

Importing this package imports nothing heavy; its modules import pyarrow.
"""
