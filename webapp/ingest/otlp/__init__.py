"""OTLP ingestion: OpenTelemetry traces and logs from GenAI instrumentations, projected onto
Toolscope's conversations, messages, rounds and tool calls (docs/otlp.md).

The pure core, with no Flask or database inside:
- `protobuf_reader` / `json_reader`: an export request's bytes → `records.Span` and
  `records.LogRecord` values, the same for both encodings;
- `normalize`: one normalized record per span and per GenAI log record (classification, the
  message model, every source in precedence order);
- `redact`: the project's redaction rules applied to the tool arguments and results inside
  normalized records, before anything is stored;
- `projection`: the set of normalized records → conversations, turns, rounds and calls.

Around it, with the database: `store` writes the raw rows and the projection, and
`receiver.receive` is the one entry point, an export request's body in (decode, normalize and
redact, prepare, write), what to answer out; the HTTP route around it is transport only.
"""

# Messages whose external id starts with this are written by the projector only: the native
# API answers 409 to a write of one (the projection would overwrite it).
OWNED_MESSAGE_PREFIX = "otel-"
