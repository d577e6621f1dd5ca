"""Studies over the API: a what-if over many conversations (docs/runs.md, 'Studies').

``POST /studies`` picks the conversations (ids, or the conversation list's filters), checks
the variants on the first one, estimates tokens and cost from the stored token counts,
refuses over the spending cap (422 with the estimate) and otherwise stores the study
`preparing`: 202 at once, the run worker prepares its runs and sends them
(``webapp.services.studies``). ``GET /studies/<id>`` gives its status, progress and, when done,
its report; ``POST /studies/<id>/cancel`` cancels its queued runs. A study is its project's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from flask import after_this_request, g, jsonify
from flask_openapi3 import Tag
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    create_model,
)

from ..analytics.filters import range_start
from ..db import utcnow
from ..errors import ApiError
from ..ingest.transaction import Write
from ..queries import call_explorer, call_selection
from ..queries.conversation_list import MAX_QUERY_CHARS, ListFilters, search_text
from ..services import model_runs, studies
from ..services.model_runs import RunInputError
from ..services.studies import StudyRefused, StudySpec, VariantSpec
from . import bp
from .endpoint import endpoint
from .runs import EditIn, RunCreate, _input_error, wake_worker
from .schemas import NUL_FREE, WRITE_ERRORS, ShortName, _no_nul, error_responses

TAG = Tag(
    name="Studies",
    description="A what-if over many conversations: two variants (replay policies, models, or "
    "a policy against what the agent did) sent for each, and how often the next action agrees.",
)

_OPTIONS = tuple(model_runs.OPTION_FIELDS)


# Replay options by their replay-API names, checked and documented as a run's (RunCreate's
# fields), and optionally the variant's own connection and model.
VariantIn = create_model(
    "VariantIn",
    __config__=ConfigDict(extra="forbid"),
    __doc__="Replay options by their replay-API names (defaults as there), and optionally the "
    "variant's own connection and model (default: the study's).",
    connection=(ShortName | None, None),
    model=(ShortName | None, None),
    **{
        name: (RunCreate.model_fields[name].annotation, RunCreate.model_fields[name])
        for name in _OPTIONS
    },
)


class FiltersIn(BaseModel):
    """The conversation list's filters (its query arguments, same names)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    q: Annotated[
        str, StringConstraints(max_length=MAX_QUERY_CHARS), AfterValidator(_no_nul)
    ] | None = Field(default=None, json_schema_extra=NUL_FREE)
    channel: ShortName | None = None
    has_errors: bool = False
    missing_responses: bool = False
    failed_runs: bool = False
    range: Literal["1h", "24h", "7d", "30d"] | None = None


_CallQuery = Annotated[
    str, StringConstraints(max_length=call_explorer.MAX_QUERY_CHARS), AfterValidator(_no_nul)
]
_Count = Annotated[int, Field(ge=0, le=2**53)]


def _moment(name: str) -> AfterValidator:
    """A day or an ISO 8601 time the explorer reads as ``name`` (refused by the schema's
    validation, like any malformed field, rather than once the body was accepted)."""

    def check(value: str) -> str:
        try:
            call_selection.selection_filters({name: value})
        except call_selection.FilterError as exc:
            raise ValueError(exc.message) from None
        return value

    return AfterValidator(check)


# The explorer's `from` and `to` (webapp.api.calls): a date or a date-time.
_MOMENT = WithJsonSchema(
    {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}
)
_From = Annotated[str, StringConstraints(max_length=64), _moment("from"), _MOMENT]
_To = Annotated[str, StringConstraints(max_length=64), _moment("to"), _MOMENT]


class CallsFiltersIn(BaseModel):
    """The calls explorer's filters (its query arguments, same names and meaning; no sort)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    q: _CallQuery | None = Field(default=None, json_schema_extra=NUL_FREE)
    tool: ShortName | None = None
    status: Literal[call_explorer.STATUSES] | None = None  # type: ignore[valid-type]
    channel: ShortName | None = None
    min_ms: _Count | None = None
    max_ms: _Count | None = None
    min_bytes: _Count | None = None
    max_bytes: _Count | None = None
    from_: _From | None = Field(
        default=None, alias="from", description="A date (2026-03-10) or an ISO 8601 time."
    )
    to: _To | None = Field(default=None, description="A day given as `to` includes it.")
    range: Literal["1h", "24h", "7d", "30d"] | None = None


class CallsSelectionIn(BaseModel):
    """The conversations holding at least one call that matches the calls explorer's filters."""

    model_config = ConfigDict(extra="forbid")

    calls: CallsFiltersIn


class VariantsIn(BaseModel):
    """Variant a is sent; b is sent too, or is what the agent recorded."""

    model_config = ConfigDict(extra="forbid")

    a: VariantIn  # type: ignore[valid-type]
    b: VariantIn | Literal["recorded"]  # type: ignore[valid-type]


class StudyCreate(BaseModel):
    """A study: the conversations, two variants, the connection and model (each variant may
    name its own), edits applied to every conversation, a spending cap and the concurrency."""

    model_config = ConfigDict(extra="forbid")

    connection: ShortName = Field(description="The model connection's name.")
    model: ShortName | None = Field(default=None, description="Default: the connection's.")
    conversations: (
        Annotated[list[ShortName], Field(min_length=1, max_length=studies.MAX_CONVERSATIONS)]
        | FiltersIn
        | CallsSelectionIn
    ) = Field(
        description="Conversation ids, the conversation list's filters, or "
        '{"calls": {the calls explorer\'s filters}}: the conversations holding a matching call.'
    )
    variants: VariantsIn = Field(
        description='{"a": {replay options}, "b": {replay options} or "recorded"}.'
    )
    edits: list[EditIn] = Field(default_factory=list, max_length=1000)
    max_cost_usd: float | None = Field(
        default=None, ge=0, le=1e9, description="The spending cap, in USD."
    )
    concurrency: int = Field(default=studies.DEFAULT_CONCURRENCY, ge=1, le=studies.MAX_CONCURRENCY)
    temperature: float = Field(default=0.0, ge=0, le=model_runs.MAX_TEMPERATURE)
    max_tokens: int | None = Field(default=None, ge=1, le=model_runs.MAX_OUTPUT_TOKENS)


class StudyPath(BaseModel):
    study_id: str = Field(json_schema_extra=NUL_FREE)


class StudyProgressOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    total: int
    prepared: int = Field(
        description="Conversations whose runs are prepared (the run worker prepares them after "
        "the POST, in batches; all of them once the study is `running`)."
    )
    done: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    cost_usd: str | None


class StudyOut(BaseModel):
    """A study (docs/runs.md, 'Studies')."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: Literal["study"]
    status: Literal["preparing", "running", "succeeded", "cancelled", "stopped"]
    message: str | None
    connection: str | None
    model: str | None
    variants: dict[str, Any] | None
    edits: list[dict[str, Any]]
    filters: dict[str, Any] | None
    calls: dict[str, Any] | None = Field(
        default=None, description="The calls explorer's filters that picked the conversations."
    )
    conversations: int
    concurrency: int
    max_cost_usd: str | None
    estimate: dict[str, Any] | None = Field(
        description="{conversations, runs, input_tokens, output_tokens, cost_usd, variants}."
    )
    progress: StudyProgressOut
    backoff_until: str | None
    report: dict[str, Any] | None = Field(
        description="When done: {compared, agree, differ, categories, variants, differing}."
    )
    created_at: str | None
    finished_at: str | None


def _spec(body: StudyCreate) -> StudySpec:
    variants: dict[str, VariantSpec | str] = {}
    for name in studies.VARIANTS:
        value = getattr(body.variants, name)
        if isinstance(value, str):
            variants[name] = value
            continue
        given = value.model_fields_set
        options = {o: getattr(value, o) for o in _OPTIONS if o in given or o == "format"}
        variants[name] = VariantSpec(options, value.connection, value.model)
    ids, filters, calls = None, None, None
    if isinstance(body.conversations, list):
        ids = list(body.conversations)
    elif isinstance(body.conversations, CallsSelectionIn):
        values = body.conversations.calls.model_dump(by_alias=True, exclude_none=True)
        try:
            calls = call_selection.selection_filters(values, utcnow())
        except call_selection.FilterError as exc:
            raise RunInputError(f"conversations.calls.{exc.field}", exc.message) from None
    else:
        f = body.conversations
        filters = ListFilters(
            q=search_text(f.q),
            channel=f.channel or None,
            has_errors=f.has_errors,
            missing_responses=f.missing_responses,
            failed_runs=f.failed_runs,
            range=f.range,
            since=range_start(f.range, utcnow()) if f.range else None,
        )
    return StudySpec(
        connection=body.connection,
        variants=variants,
        model=body.model,
        conversation_ids=ids,
        filters=filters,
        calls=calls,
        edits=[edit.model_dump() for edit in body.edits],
        max_cost_usd=None if body.max_cost_usd is None else Decimal(str(body.max_cost_usd)),
        concurrency=body.concurrency,
        temperature=body.temperature,
        max_tokens=body.max_tokens,
    )


@bp.post(
    "/studies",
    tags=[TAG],
    summary="Start a study (queued); refused over its spending cap",
    responses={202: StudyOut, **error_responses(404), **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def studies_post(body: StudyCreate):
    """Answers 202 with the study, `preparing` (the run worker builds and queues its runs,
    then it is `running`), and its address in `Location`; poll
    `GET /studies/{study_id}`. 422 when the estimated cost is over `max_cost_usd` (the
    estimate is in the error's details) or a variant cannot be used; 404: no such conversation
    or connection; 409: the connection cannot be used now."""
    try:
        spec = _spec(body)
        prepared = studies.prepare_study(g.project.id, spec, now=utcnow())
    except StudyRefused as exc:
        raise ApiError(
            422,
            exc.message,
            [{"field": "max_cost_usd", "message": exc.message, "estimate": exc.estimate}],
        ) from None
    except RunInputError as exc:
        raise _input_error(exc) from None

    after_this_request(wake_worker)
    return Write(_store, (prepared,))


def _store(prepared: studies.PreparedStudy):
    row = studies.store_study(prepared)
    document = studies.document(row, studies.progress(row["id"]))
    response = jsonify(document)
    response.status_code = 202
    response.headers["Location"] = f"/api/v1/studies/{row['id']}"
    return response


@bp.get(
    "/studies/<study_id>",
    tags=[TAG],
    summary="A study: status, progress, and when done its report",
    responses={200: StudyOut, **error_responses(404, 422)},
)
@endpoint()
def study_get(path: StudyPath):
    document = studies.study_document(g.project.id, path.study_id)
    if document is None:
        raise ApiError(404, "no such study in this project")
    return jsonify(document)


@bp.post(
    "/studies/<study_id>/cancel",
    tags=[TAG],
    summary="Cancel a study: its queued runs are not sent",
    responses={200: StudyOut, **error_responses(404, 409, 422, 503)},
)
@endpoint(write=True)
def study_cancel_post(path: StudyPath):
    """Queued runs become `cancelled`; runs already sent finish and are kept (they are paid
    for); the study ends `cancelled` with a report of what ran. 409 once it has ended."""
    if not studies.cancel_in_transaction(g.project.id, path.study_id):
        row = studies.get_study(g.project.id, path.study_id)
        if row is None:
            raise ApiError(404, "no such study in this project")
        raise ApiError(409, f"the study has ended ({row['status']}); nothing to cancel")
    return jsonify(studies.study_document(g.project.id, path.study_id))
