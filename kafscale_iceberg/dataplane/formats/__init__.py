"""The decoder room: one decoder per record value format, behind one interface, chosen by the mapping.

**The interface** (the `ValueDecoder` port in `ports.py`; its values in `decoding.py`). A decoder
takes a batch of raw record values (an Arrow binary array, nullable) and returns a `DecodedBatch`:

- `groups`: the records that decoded, grouped by the schema they were written with; each group has
  the positions of its records in the batch, the records as one Arrow struct array typed by *that*
  schema (`records`), the columns that schema gives (`columns`, `domain/avro_schemas.py` and friends)
  and a label naming the schema in messages (`schema id 7`);
- `errors`: per position of a record that did not decode, its dead-letter kind (`ErrorKind`) and
  a reason naming the schema id and what failed.

Null and empty values are in no group and have no error: every column is null, as for JSON.

`conform(batch, columns)` (`decoding.py`) then projects every group onto the run's columns by name
(widening `int` -> `long` and the like, a column the schema lacks null, a value that does not convert
null and counted) and returns the columns in batch order as an `ExtractedColumns`, which
`RecordConverter` (`dataplane/conversion.py`) takes exactly as it takes columns parsed from JSON: the
required-column rule, conversion-failure counts, strict mode and dead letters are the same code.
The rest of the data plane (routing, Parquet, field ids, inference-style evolution) never sees a
format. The columns a batch's schemas give are what the observation stage reports
(`dataplane/observation.py`), merged by the driver with `domain/schema_evolution.evolved_columns`.

**The formats**, one module each: `connect_json.py` (Kafka Connect's JSON envelope), `avro.py`
(Confluent wire format; a Rust-backed reader fed container blocks of records sharing a schema id,
fastavro for what it refuses). Registered formats read schemas through a `SchemaCache`
(`schema_cache.py`: per schema id, per task, at most one registry look-up) over the
`RecordSchemaRegistry` port (`ports.py`); the wire header is `wire.py`'s. Each format is described once,
by its `ValueFormatSpec` in `domain/value_formats.py` (where its schema comes from, upsert, keys, its
decoder factory); `decoder_for` (`choice.py`) makes the decoder the spec of a mapping's `value_format`
names (None for `json`, which `RecordConverter` reads itself).

To add a format: a module here with a class that has `decode(values) -> DecodedBatch` and a factory
`decoder(settings, schemas, *, part)`, its schema -> columns mapping in `domain/` when it has one, and
one `ValueFormatSpec` line in `domain/value_formats.VALUE_FORMATS` (`tests/test_value_formats.py`
adds a toy format so).
"""
