"""Runs over the API: send a conversation's replay to a model connection, read what came back
(docs/runs.md, 'Runs').

``POST /conversations/<cid>/runs`` checks the request, builds the replay (the replay API's
options and parser, the edits applied first) and queues the run; it answers 202 at once with
the run document: no gunicorn thread ever waits on a model (the run worker sends it,
``webapp.services.run_worker``). ``GET /runs/<id>`` and ``GET /conversations/<cid>/runs``
read runs back. Runs are the project's: another project's run is not found.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from flask import after_this_request, g, jsonify
from flask_openapi3 import Tag
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
)

from ..db import utcnow
from ..errors import ApiError
from ..ingest.transaction import Write
from ..queries.conversations import find_conversation
from ..replay.export import OptionalTokens, ReplayQuery, parse_query
from ..replay.options import Format, Persistence, PruneMode
from ..services import model_runs
from ..services.model_runs import RunInputError, RunSpec
from . import bp, serializers
from .endpoint import endpoint
from .schemas import NUL_FREE, WRITE_ERRORS, ConversationPath, ShortName, error_responses

TAG = Tag(
    name="Runs",
    description="A conversation's replay sent to a model connection (queued, then sent by the "
    "server's run worker), with the model's next action beside what the agent did.",
)

_REPLAY_SCHEMA = ReplayQuery.model_json_schema()["properties"]


def _replay_option(name: str) -> AfterValidator:
    """Checks a value as the replay API's parser does (``replay.export.parse_query``)."""

    def check(value: Any) -> Any:
        parse_query(model_runs.option_params({name: value}))  # OptionError is a ValueError
        return value

    return AfterValidator(check)


def _number_as_text(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be 'default', 'off' or a number of seconds")
    return str(value) if isinstance(value, int | float) else value


def _schema_of(name: str) -> WithJsonSchema:
    schema = {k: v for k, v in _REPLAY_SCHEMA[name].items() if k in ("anyOf", "type", "enum")}
    return WithJsonSchema(schema)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


Text = Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra=NUL_FREE)]
CallId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    AfterValidator(_no_nul),
    Field(json_schema_extra=NUL_FREE),
]


class _Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplaceResult(_Edit):
    type: Literal["replace_result"]
    call_id: CallId = Field(description="The call's id as the agent gave it (the replay's).")
    content: Text = Field(description="The result the model sees instead.")


class FailCall(_Edit):
    type: Literal["fail_call"]
    call_id: CallId
    message: Text = Field(description="The error the model sees as the call's result.")


class DropCall(_Edit):
    type: Literal["drop_call"]
    call_id: CallId


class AppendUserMessage(_Edit):
    type: Literal["append_user_message"]
    content: Text


EditIn = Annotated[
    ReplaceResult | FailCall | DropCall | AppendUserMessage, Field(discriminator="type")
]


class RunCreate(BaseModel):
    """A run: the connection (by name), the model, the replay options by their replay-API
    names (defaults as there), edits applied to the replayed history before it is sent, and
    sampling. With `temperature` 0 the same request body to the same connection is answered
    from the newest succeeded run that sent it, unless `fresh` is true."""

    model_config = ConfigDict(extra="forbid")

    connection: ShortName = Field(description="The model connection's name.")
    model: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=200),
            AfterValidator(_no_nul),
            Field(json_schema_extra=NUL_FREE),
        ]
        | None
    ) = Field(default=None, description="Default: the connection's default model.")
    format: Format = Field(default="openai-chat", description="The provider format sent.")
    as_of: Annotated[str, _replay_option("as_of"), _schema_of("as_of")] = Field(
        default="now", description=_REPLAY_SCHEMA["as_of"].get("description")
    )
    freshness: Annotated[
        str,
        BeforeValidator(_number_as_text),
        _replay_option("freshness"),
        _schema_of("freshness"),
    ] = Field(default="default", description=_REPLAY_SCHEMA["freshness"].get("description"))
    persistence: Persistence = "per-run"
    trim_trailing: bool = True
    compact_sources: bool = True
    result_token_cap: OptionalTokens = None
    context_budget: OptionalTokens = None
    prune: PruneMode = "fifo"
    edits: list[EditIn] = Field(default_factory=list, max_length=1000)
    temperature: float = Field(default=0.0, ge=0, le=model_runs.MAX_TEMPERATURE)
    max_tokens: int | None = Field(default=None, ge=1, le=model_runs.MAX_OUTPUT_TOKENS)
    fresh: bool = Field(default=False, description="Send even if a stored run answers it.")


class RunPath(BaseModel):
    run_id: str = Field(json_schema_extra=NUL_FREE)


class RunErrorOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: int | None = Field(description="The provider's HTTP status (null: no answer).")
    kind: str = Field(
        description="auth, model_not_found, bad_request, rate_limited, server_error, "
        "http_error, timeout, connection, malformed_answer, interrupted, internal."
    )
    message: str


class RunUsageOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_tokens: int | None
    output_tokens: int | None


class RunOut(BaseModel):
    """A run (docs/runs.md, 'Runs')."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: Literal["run"]
    conversation: str
    connection: str
    model: str
    format: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    options: dict[str, Any] = Field(description="The replay options as given.")
    edits: list[dict[str, Any]]
    as_of: str | None = Field(description="The replay's cut, resolved.")
    temperature: float | None
    max_tokens: int | None
    request: dict[str, Any] = Field(description="The exact body sent (no credentials).")
    request_key: str
    response: dict[str, Any] | None = Field(description="The provider's raw answer.")
    next_action: dict[str, Any] | None = Field(
        description="{kind: calls|answer|empty, calls: [{name, arguments, id}], text}."
    )
    recorded_action: dict[str, Any] | None = Field(description="What the agent did next.")
    comparison: dict[str, Any] | None = Field(
        description="{category, label, argument_diffs, word_diff}."
    )
    usage: RunUsageOut
    cost_usd: str | None
    latency_ms: int | None
    error: RunErrorOut | None
    attempts: int
    cached_from: str | None
    study_id: str | None
    variant: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None


class RunList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object: Literal["list"]
    data: list[RunOut]
    has_more: bool


def run_document(row: dict[str, Any], conversation_external_id: str | None = None) -> dict:
    return {"object": "run", **model_runs.document(row, conversation_external_id)}


def _input_error(exc: RunInputError) -> ApiError:
    return ApiError(
        exc.status,
        f"{exc.field}: {exc.message}",
        [{"field": exc.field, "message": exc.message}],
    )


@bp.post(
    "/conversations/<cid>/runs",
    tags=[TAG],
    summary="Send the conversation's replay to a model (queued)",
    responses={202: RunOut, **error_responses(404), **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def runs_post(path: ConversationPath, body: RunCreate):
    """Answers 202 with the run, `queued` (or `succeeded` at once when a stored run answers
    the same request), and its address in `Location`; poll `GET /runs/{run_id}`. 404: no
    such conversation, turn or connection; 409: the connection cannot be used now (its
    environment variable is unset, its key cannot be decrypted, its host is not allowed);
    422: options or edits that cannot be used."""
    conversation = find_conversation(g.project.id, external_id=path.cid)
    if conversation is None:
        raise ApiError(404, "no such conversation in this project")
    given = body.model_fields_set
    options = {
        name: getattr(body, name)
        for name in model_runs.OPTION_FIELDS
        if name in given or name == "format"
    }
    spec = RunSpec(
        connection=body.connection,
        model=body.model,
        options=options,
        edits=[edit.model_dump() for edit in body.edits],
        temperature=body.temperature,
        max_tokens=body.max_tokens,
        fresh=body.fresh,
    )
    try:
        prepared = model_runs.prepare_run(g.project.id, conversation, spec, now=utcnow())
    except RunInputError as exc:
        raise _input_error(exc) from None

    after_this_request(wake_worker)  # after the commit: a worker in this process starts at once
    return Write(_store_run_answer, (prepared, conversation.external_id))


def wake_worker(response: Any) -> Any:
    """Tell this process's run worker (`toolscope serve`) that runs were queued; a module
    function, not a closure, as a prepare view's steps are (tests/test_ingest_write_steps.py)."""
    model_runs.notify()
    return response


def _store_run_answer(prepared: model_runs.PreparedRun, conversation_external_id: str):
    row = model_runs.store_run(prepared)
    response = jsonify(run_document(row, conversation_external_id))
    response.status_code = 202
    response.headers["Location"] = f"/api/v1/runs/{row['id']}"
    return response


@bp.get(
    "/runs/<run_id>",
    tags=[TAG],
    summary="A run: its status, and when done, the model's next action",
    responses={200: RunOut, **error_responses(404, 422)},
)
@endpoint()
def run_get(path: RunPath):
    row = model_runs.get_run(g.project.id, path.run_id)
    if row is None:
        raise ApiError(404, "no such run in this project")
    return jsonify(run_document(row))


@bp.get(
    "/conversations/<cid>/runs",
    tags=[TAG],
    summary="A conversation's runs, newest first",
    responses={200: RunList, **error_responses(404, 422)},
)
@endpoint()
def conversation_runs_get(path: ConversationPath):
    """The conversation's last 100 runs, newest first."""
    conversation = find_conversation(g.project.id, external_id=path.cid)
    if conversation is None:
        raise ApiError(404, "no such conversation in this project")
    rows = model_runs.list_runs(g.project.id, conversation.id)
    return jsonify(serializers.listing([run_document(r) for r in rows]))


@bp.post(
    "/runs/<run_id>/cancel",
    tags=[TAG],
    summary="Cancel a queued or running run",
    responses={200: RunOut, **error_responses(404, 409, 422, 503)},
)
@endpoint(write=True)
def run_cancel_post(path: RunPath):
    """A queued run is not sent; a running one's answer, when it comes, is not stored (the
    provider may still bill it). 409 when the run has finished already."""
    if not model_runs.cancel_in_transaction(g.project.id, path.run_id):
        row = model_runs.get_run(g.project.id, path.run_id)
        if row is None:
            raise ApiError(404, "no such run in this project")
        raise ApiError(409, f"the run has finished ({row['status']}); nothing to cancel")
    row = model_runs.get_run(g.project.id, path.run_id)
    return jsonify(run_document(row))
