"""What a replay asks for: a topic, optionally some partitions and a first offset, optionally a reset.

Validated once, at the edge (the CLI's arguments, the replay function's event): `ReplayRequest.parse`
and `ReplayEvent.parse` raise `ReplayRequestError` naming the field, never a pydantic traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from kafscale_iceberg.exceptions import ReplayRequestError, SegmentKeyError
from kafscale_iceberg.segments.keys import validate_topic


class ReplayRequest(BaseModel):
    """Re-enqueue a topic's segments (some partitions, from an offset); optionally rebuild that range.

    `partitions` None means every partition; `from_offset` None means from the start (offset 0).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partitions: tuple[StrictInt, ...] | None = None
    from_offset: StrictInt | None = None
    reset_offsets: StrictBool = False

    @field_validator("topic")
    @classmethod
    def _kafka_topic(cls, value: str) -> str:
        try:
            return validate_topic(value)
        except SegmentKeyError as exc:
            raise ValueError(f"{value!r} is not a Kafka topic name: {exc.problem}") from None

    @field_validator("partitions")
    @classmethod
    def _partition_numbers(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must list at least one partition, or be null for every partition")
        negative = [p for p in value if p < 0]
        if negative:
            raise ValueError(f"partitions are numbered from 0, got {negative}")
        return tuple(sorted(set(value)))

    @field_validator("from_offset")
    @classmethod
    def _offset(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"offsets start at 0, got {value} (omit it to replay from the start)")
        return value

    @property
    def first_offset(self) -> int:
        """The first offset the replay covers (0 when `from_offset` is not given)."""
        return self.from_offset or 0

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str) -> Self:
        """Validate `data`; raises `ReplayRequestError` naming `source` and the first field at fault."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            where = f"field {field!r}: " if field else ""
            raise ReplayRequestError(f"{source}: {where}{message}") from None


class ReplayEvent(ReplayRequest):
    """The replay function's event: a `ReplayRequest`, and `confirm` (the topic) when it resets offsets."""

    confirm: str | None = None

    @model_validator(mode="after")
    def _reset_is_confirmed(self) -> ReplayEvent:
        if self.reset_offsets and self.confirm != self.topic:
            raise ValueError(
                f"field 'confirm' must equal the topic ({self.topic!r}) when reset_offsets is true: the "
                f"reset deletes the range's rows before re-ingesting them (got {self.confirm!r})"
            )
        return self

    def request(self) -> ReplayRequest:
        """The request without the confirmation."""
        return ReplayRequest.model_validate(self.model_dump(exclude={"confirm"}))
