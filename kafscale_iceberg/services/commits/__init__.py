"""The commit cluster: a finished run's files into its Iceberg tables exactly once, then its offsets.

- `commit`: the commit step (`CommitService`): the order of a run's table writes, offsets, lease;
- `outcome`: what a commit did (`CommitOutcome`), the value every other module here and its callers share;
- `run_writes`: what each table's write is, read from the plan and result;
- `verified_commit`: the one verified table-write loop (shared with offset resets);
- `upsert_commit`: an upsert anchor's write, replacing the files the run rewrote;
- `checkpoint_sync`: the checkpoint store kept in step with the tables;
- `stranded_runs`: a run stranded between its tables' commits, finished.

Imports go one way: `commit` on the others, `stranded_runs` on `outcome` and `run_writes`, none back.
"""
