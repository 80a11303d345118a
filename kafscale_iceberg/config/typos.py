"""A misspelled key, named again in the error it causes: `create_tabel_if_missing: true` is warned about
at start (an unknown key, ignored), then the run fails with "table ... does not exist (... set
create_table_if_missing: true)" - a person reading the failure must be pointed back at the typo.

`unknown_key_note(config, topic)`: the unknown keys of the topic's mappings and of the top-level sections,
each with the known key it most resembles, as one clause to append to an error line (empty when none).
"""

from __future__ import annotations

import difflib
import re

from kafscale_iceberg.config.mappings import MappingConfig
from kafscale_iceberg.config.model import KafscaleConfig

_MAPPING_KEY = re.compile(r"^mappings\[(\d+)\]\.")


def unknown_key_note(config: KafscaleConfig, topic: str | None) -> str:
    """`; the config's unknown key mappings[0].create_tabel_if_missing was ignored (did you mean
    create_table_if_missing?)`, or "" when the topic's mappings and the sections have no unknown key."""
    indexes = {i for i, m in enumerate(config.mappings) if m.topic == topic}
    keys = []
    for key in config.unknown_keys:
        match = _MAPPING_KEY.match(key)
        if match is None or int(match.group(1)) in indexes:
            keys.append(key + _nearest(key))
    if not keys:
        return ""
    one = len(keys) == 1
    return (
        f"; the config's unknown key{'' if one else 's'} {', '.join(keys)} {'was' if one else 'were'} ignored"
    )


def _nearest(key: str) -> str:
    """` (did you mean X?)` for a mapping key close to one of `MappingConfig`'s, else ""."""
    if not _MAPPING_KEY.match(key) or key.count(".") != 1:
        return ""
    name = key.rsplit(".", 1)[1]
    known = [field.alias or field_name for field_name, field in MappingConfig.model_fields.items()]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""
