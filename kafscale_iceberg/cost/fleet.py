"""A fleet file: the topics a user means to land, their rates and segment sizes, and prices if not us-east-1.

```yaml
topics:
  - name: orders          # a label
    count: 1              # topics alike (default 1)
    rate: 20MB            # bytes a second per topic (a number, or 20MB, 50KB, 1MiB ...)
    segment_bytes: 1MiB   # optional (default 1 MiB)
    partitions: 4         # optional (default 2)
    max_wait_seconds: 60  # optional: runs.max_wait_seconds for these topics
    min_bytes_per_run: 256MiB  # optional: runs.min_bytes_per_run for these topics
prices:                   # optional: any PriceList field, USD (kafscale_iceberg/cost/prices.py)
  lambda_gb_s_arm: 0.0000133334
throughput_factor: 1.0    # optional: the measured throughput times this (0.5: half as fast)
```

Validated once, here: an error names the key (`topics[2].rate: ...`) and raises `ConfigError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ByteSize, ConfigDict, Field, ValidationError

from kafscale_iceberg.cost.model import MIB, TopicGroup, Workload
from kafscale_iceberg.cost.prices import PriceList
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError


class FleetTopic(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1)]
    count: Annotated[int, Field(ge=1)] = 1
    rate: ByteSize
    """Bytes a second per topic."""
    segment_bytes: Annotated[ByteSize, Field(gt=0)] = ByteSize(MIB)
    partitions: Annotated[int, Field(ge=1)] = 2
    max_wait_seconds: Annotated[float, Field(ge=0)] | None = None
    min_bytes_per_run: ByteSize | None = None

    def group(self) -> TopicGroup:
        return TopicGroup(
            name=self.name,
            count=self.count,
            mb_per_s=int(self.rate) / 1e6,
            segment_bytes=int(self.segment_bytes),
            partitions=self.partitions,
            max_wait_s=self.max_wait_seconds,
            min_bytes=None if self.min_bytes_per_run is None else int(self.min_bytes_per_run),
        )


class Fleet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "fleet"
    topics: Annotated[list[FleetTopic], Field(min_length=1)]
    prices: PriceList = PriceList()
    throughput_factor: Annotated[float, Field(gt=0)] = 1.0

    def workload(self) -> Workload:
        return Workload(self.name, tuple(topic.group() for topic in self.topics))


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the file)"


def load_fleet(path: Path) -> Fleet:
    """The fleet file at `path`, validated; `ConfigError` naming the file and the key otherwise."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError("--fleet", f"cannot read the fleet file {path}: {exc}") from exc
    try:
        return Fleet.model_validate(document)
    except ValidationError as exc:
        problems = [(_location(e["loc"]), e["msg"]) for e in exc.errors()]
        raise ConfigValidationError(
            f"fleet file {path}",
            problems,
            note="the keys are docs/cost.md's (kafscale_iceberg/cost/fleet.py)",
        ) from exc
