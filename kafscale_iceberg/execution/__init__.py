"""Executing a run plan: the driver every runner shares (`driver.py`) and the in-process way to map
its tasks (`in_process.py`); Spark's way is `spark_app/job.py`."""
