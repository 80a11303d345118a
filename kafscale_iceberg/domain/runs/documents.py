"""What every run document shares: the frozen model base and the offset types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NO_OFFSET = -1
"""The committed offset of a partition nothing was committed from (KafScale's convention)."""

Offset = Annotated[int, Field(ge=NO_OFFSET, le=2**63 - 1)]
PartitionNumber = Annotated[int, Field(ge=0, le=2**31 - 1)]
PartitionValue = str | int | float | bool | None


class DocumentModel(BaseModel):
    """A value of a run document: immutable, and no key it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")
