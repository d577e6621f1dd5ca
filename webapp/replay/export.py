"""Replay options read from query parameters, the replay of a loaded conversation with them, and
the export document. Pure: no Flask, no database, no clock (the caller passes "now").

The API (``GET /api/v1/conversations/<cid>/replay``) and the dashboard's preview read the same
parameters, declared once in :class:`ReplayQuery`:

=================  ===========================================================  ===============
parameter          values                                                       default
=================  ===========================================================  ===============
format             ``openai-chat`` | ``openai-responses`` | ``anthropic``       ``openai-chat``
as_of              ``now`` | ``turn:<n>`` (1-based: the moment the user message  ``now``
                   that starts turn n was stored) | an ISO 8601 time (without
                   an offset it is UTC)
freshness          ``default`` (channel's window, else the project's) | ``off``  ``default``
                   | seconds
persistence        ``per-run`` | ``per-service-call``                           ``per-run``
trim_trailing      ``true`` | ``false`` (also 1/0, on/off, yes/no)              ``true``
compact_sources    ``true`` | ``false``                                         ``true``
result_token_cap   tokens; empty or absent: no cap                              none
context_budget     tokens; empty or absent: no budget                           none
prune              ``fifo`` | ``turns``                                         ``fifo``
=================  ===========================================================  ===============

A parameter that cannot be used is an :class:`OptionError` naming it; the API answers 422 with
the JSON error shape, the page an error page (or the JSON twin's error).

:func:`build_replay` replays a loaded history with the options (:class:`BuiltReplay`, whose
checks run when first asked for). The export document (``schema_version`` 1) is what the API
returns and the page downloads; see :func:`export_document` and docs/replay.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)

from . import ReplayOptions, ReplayResult, replay, turn_starts, validate
from .diagnostics import Problem
from .history import History
from .naive import naive_replay_problems
from .options import Format, Persistence, PruneMode
from .validate import Memo

SCHEMA_VERSION = 1
# Far above any model's context; keeps the numbers inside PostgreSQL's and JSON's comfort zone.
MAX_TOKENS = 100_000_000
# Ten years: a longer freshness window is the same as "off", and says so more clearly.
MAX_FRESHNESS_SECONDS = 10 * 365 * 24 * 3600

_TURN_RE = re.compile(r"turn:(\d{1,9})")


class OptionError(ValueError):
    """A replay parameter that cannot be used; ``field`` is the parameter's name."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NoSuchTurn(OptionError):
    """``as_of=turn:<n>`` for a turn the conversation does not have (yet): well formed, but
    nothing to show (the API's 404)."""


# --- Reading the parameters -------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime; without an offset it is taken as UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            "must be 'now', 'turn:<n>' or an ISO 8601 time such as 2025-01-31T12:00:00Z"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _check_as_of(value: str) -> str:
    value = value.strip()
    if value == "now" or _TURN_RE.fullmatch(value):
        return value
    parse_time(value)
    return value


def _check_freshness(value: str) -> str:
    value = value.strip()
    if value in ("default", "off"):
        return value
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("must be 'default', 'off' or a number of seconds") from None
    if not 0 <= seconds <= MAX_FRESHNESS_SECONDS:  # also refuses NaN
        raise ValueError(f"must be between 0 and {MAX_FRESHNESS_SECONDS} seconds (or 'off')")
    return value


def _blank_is_none(value: Any) -> Any:
    """An empty form field means "not set"."""
    return None if isinstance(value, str) and not value.strip() else value


Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
# The OpenAPI document says that an empty value is accepted too (it means "not set").
OptionalTokens = Annotated[
    Tokens | None,
    BeforeValidator(_blank_is_none),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
                {"type": "string", "maxLength": 0},
                {"type": "null"},
            ]
        }
    ),
]


# What `_check_as_of` and `_check_freshness` accept, in the OpenAPI document.
_AS_OF_SCHEMA = {
    "anyOf": [
        {"type": "string", "enum": ["now"]},
        {"type": "string", "pattern": "^turn:[0-9]{1,9}$"},
        {"type": "string", "format": "date-time"},
    ]
}
_FRESHNESS_SCHEMA = {
    "anyOf": [
        {"type": "string", "enum": ["default", "off"]},
        {"type": "number", "minimum": 0, "maximum": MAX_FRESHNESS_SECONDS},
    ]
}


class ReplayQuery(BaseModel):
    """The replay's query parameters (documented in the OpenAPI document from this class)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Format = Field(default="openai-chat", description="Provider format of `payload`.")
    as_of: Annotated[str, AfterValidator(_check_as_of), WithJsonSchema(_AS_OF_SCHEMA)] = Field(
        default="now",
        description="`now`, `turn:<n>` (1-based: when the user message starting turn n was "
        "stored) or an ISO 8601 time (UTC when it has no offset). Rows created later do not "
        "exist yet.",
    )
    freshness: Annotated[
        str, AfterValidator(_check_freshness), WithJsonSchema(_FRESHNESS_SCHEMA)
    ] = Field(
        default="default",
        description="Freshness window: `default` (the channel's, else the project's), `off`, or "
        "seconds. Results older than the window at `as_of` are left out.",
    )
    persistence: Persistence = Field(
        default="per-run",
        description="`per-run`: an unfinished run contributes nothing; `per-service-call`: its "
        "completed rounds are replayed.",
    )
    trim_trailing: bool = Field(
        default=True, description="Drop a run's last round when no service call consumed it."
    )
    compact_sources: bool = Field(
        default=True, description="Keep only the sources the answer cites as [sourceN]."
    )
    result_token_cap: OptionalTokens = Field(
        default=None, description="Cut results longer than this many tokens (with a notice)."
    )
    context_budget: OptionalTokens = Field(
        default=None, description="Drop the oldest removable messages until this many fit."
    )
    prune: PruneMode = Field(
        default="fifo", description="`fifo`: oldest unit first; `turns`: oldest whole turn."
    )
    download: bool = Field(
        default=False,
        description="Answer as a file download (`Content-Disposition: attachment`).",
    )


# The replay options proper (``download`` only changes how the answer is sent).
OPTION_FIELDS: tuple[str, ...] = tuple(f for f in ReplayQuery.model_fields if f != "download")


def parse_query(params: Mapping[str, str], *, prefix: str = "") -> ReplayQuery:
    """The replay parameters among ``params`` (others are ignored), read with ``prefix``
    (``"a."`` for side A of a comparison). Raises :class:`OptionError` naming the parameter."""
    values = {
        name: params[prefix + name] for name in ReplayQuery.model_fields if prefix + name in params
    }
    try:
        return ReplayQuery.model_validate(values)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        name = ".".join(str(part) for part in error["loc"][:1])
        raise OptionError(prefix + name, error["msg"]) from None


def form_params(params: Mapping[str, str], *, prefix: str = "") -> dict[str, str]:
    """A form's fields as replay parameters (the preview's, the conversation charts'). A field
    left empty means the default. The preview's "as of" and "freshness" selects offer ``custom``
    next to a field of their own (``as_of_custom``, ``freshness_custom``), whose value then
    becomes the parameter."""
    out = {name: value for name, value in params.items() if value.strip()}
    for name in ("as_of", "freshness"):
        custom = out.pop(f"{prefix}{name}_custom", "").strip()
        if out.get(prefix + name) == "custom":
            if custom:
                out[prefix + name] = custom
            else:
                del out[prefix + name]
    return out


COMPARE_SIDES = ("a", "b")


def comparison_params(params: Mapping[str, str]) -> dict[str, str]:
    """Both sides' parameters, prefixed ``a.`` and ``b.``: an un-prefixed parameter applies to
    both sides unless a side sets its own. Without any side parameter the comparison is the
    classic one: side B takes the other persistence mode."""
    shared = {k: v for k, v in params.items() if "." not in k}
    sided = {f"{side}.{k}": v for side in COMPARE_SIDES for k, v in shared.items()}
    own = {k: v for k, v in params.items() if k.startswith(("a.", "b."))}
    if not own:
        mode = shared.get("persistence", "per-run")
        own["b.persistence"] = "per-run" if mode == "per-service-call" else "per-service-call"
    sided.update(own)
    return sided


def parse_comparison(params: Mapping[str, str]) -> tuple[ReplayQuery, ReplayQuery]:
    """The two option sets of a comparison (see :func:`comparison_params`)."""
    sided = comparison_params(params)
    queries = []
    for side in COMPARE_SIDES:
        prefix = side + "."
        own = {k: v for k, v in sided.items() if k.startswith(prefix)}
        queries.append(parse_query(form_params(own, prefix=prefix), prefix=prefix))
    return queries[0], queries[1]


def query_params(query: ReplayQuery, *, prefix: str = "") -> dict[str, str]:
    """The parameters that differ from the defaults, as strings: for links and URLs."""
    out: dict[str, str] = {}
    for name in OPTION_FIELDS:
        value = getattr(query, name)
        if value == ReplayQuery.model_fields[name].default:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[prefix + name] = str(value)
    return out


# --- Resolving them against a conversation ----------------------------------------------------


def resolve_as_of(raw: str, *, now: datetime, turn_times: Sequence[datetime]) -> datetime:
    """``now``, the start of a turn (1-based) or the given time."""
    if raw == "now":
        return now
    turn = _TURN_RE.fullmatch(raw)
    if turn:
        n = int(turn.group(1))
        if not 1 <= n <= len(turn_times):
            has = f"{len(turn_times)} turn" + ("" if len(turn_times) == 1 else "s")
            raise NoSuchTurn("as_of", f"there is no turn {n}: this conversation has {has}")
        return turn_times[n - 1]
    return parse_time(raw)


def resolve_freshness(raw: str, configured: float | None) -> float | None:
    """``default`` is the configured window (channel, else project; None = off)."""
    if raw == "default":
        return configured
    if raw == "off":
        return None
    return float(raw)


def replay_options(
    query: ReplayQuery,
    *,
    now: datetime,
    turn_times: Sequence[datetime],
    configured_freshness: float | None,
    count_tokens: Callable[[str], int],
) -> ReplayOptions:
    return ReplayOptions(
        as_of=resolve_as_of(query.as_of, now=now, turn_times=turn_times),
        format=query.format,
        freshness_seconds=resolve_freshness(query.freshness, configured_freshness),
        persistence=query.persistence,
        trim_trailing=query.trim_trailing,
        compact_sources=query.compact_sources,
        result_token_cap=query.result_token_cap,
        context_budget=query.context_budget,
        prune=query.prune,
        count_tokens=count_tokens,
    )


# --- The replay of a stored conversation -----------------------------------------------------


class ReplayedConversation(Protocol):
    """What the replay needs to know of a stored conversation besides its history (the
    ``ConversationRecord`` the dashboard and the API read)."""

    @property
    def external_id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def channel(self) -> str | None: ...
    @property
    def freshness_seconds(self) -> int | float | None:
        """The configured window: the channel's, else the project's (None: off)."""


def turn_times(history: History) -> list[datetime]:
    """When each turn started (its user message), in order: ``as_of=turn:<n>`` picks one."""
    return [t.created_at for t in turn_starts(history)]


@dataclass
class BuiltReplay:
    """One replay of a loaded conversation, with the checks the export document carries."""

    conversation: ReplayedConversation
    history: History
    query: ReplayQuery
    options: ReplayOptions
    result: ReplayResult
    token_counter: str
    _checks: dict[str, list[Problem]] = field(default_factory=dict, repr=False)
    # Shared by the two checks: the naive payload sends the replay's argument strings.
    _memo: Memo = field(default_factory=Memo, repr=False)

    def note_object_arguments(self, arguments: Iterable[str]) -> None:
        """Argument strings the caller knows ``jsonfast.loads`` to read as a JSON object (the
        loader's ``LoadedHistory.object_arguments``): the checks, run later, take them as such
        instead of parsing them again. Only speed: a check's outcome is the same either way
        (the fast path of docs/replay.md, "The answer cache", used by
        ``webapp.services.replay_answer``)."""
        self._memo.object_arguments.update(arguments)

    @property
    def validation(self) -> list[Problem]:
        """What a provider would reject in our payload: expected to be empty."""
        if "validation" not in self._checks:
            self._checks["validation"] = validate(
                self.result.payload, self.options.format, self._memo
            )
        return self._checks["validation"]

    @property
    def naive_problems(self) -> list[Problem]:
        """What a provider would reject if the raw rows were replayed as they are."""
        if "naive" not in self._checks:
            self._checks["naive"] = naive_replay_problems(self.history, self.options, self._memo)
        return self._checks["naive"]

    def document(self) -> dict[str, Any]:
        return export_document(
            self.conversation,
            self.query,
            self.options,
            self.result,
            validation=self.validation,
            naive_problems=self.naive_problems,
            token_counter=self.token_counter,
        )


def build_replay(
    conversation: ReplayedConversation,
    history: History,
    query: ReplayQuery,
    *,
    now: datetime,
    count_tokens: Callable[[str], int],
    token_counter: str,
) -> BuiltReplay:
    """Replay ``history`` under ``query``, counting with ``count_tokens`` (named
    ``token_counter`` in the document); raises ``OptionError`` for an unusable ``as_of``."""
    options = replay_options(
        query,
        now=now,
        turn_times=turn_times(history),
        configured_freshness=conversation.freshness_seconds,
        count_tokens=count_tokens,
    )
    result = replay(history, options)
    return BuiltReplay(conversation, history, query, options, result, token_counter)


# --- The export document ----------------------------------------------------------------------


def whole_seconds(value: float | None) -> int | float | None:
    """Seconds as JSON shows them: 300, not 300.0."""
    return int(value) if value is not None and float(value).is_integer() else value


def export_document(
    conversation: ReplayedConversation,
    query: ReplayQuery,
    options: ReplayOptions,
    result: ReplayResult,
    *,
    validation: Sequence[Problem],
    naive_problems: Sequence[Problem],
    token_counter: str,
) -> dict[str, Any]:
    """The replay as one JSON document; ``payload`` is what the provider API accepts as is."""
    as_of = options.as_of.isoformat() if options.as_of is not None else None
    return {
        "schema_version": SCHEMA_VERSION,
        "conversation": {
            "id": conversation.external_id,
            "title": conversation.title,
            "channel": conversation.channel,
        },
        "as_of": as_of,
        "format": options.format,
        "options": {
            "as_of": query.as_of,
            "freshness": query.freshness,
            "freshness_seconds": whole_seconds(options.freshness_seconds),
            "persistence": options.persistence,
            "trim_trailing": options.trim_trailing,
            "compact_sources": options.compact_sources,
            "result_token_cap": options.result_token_cap,
            "context_budget": options.context_budget,
            "prune": options.prune,
            "token_counter": token_counter,
        },
        "payload": result.payload,
        "diagnostics": [d.to_dict() for d in result.diagnostics],
        "stats": {**result.stats, "freshness_seconds": whole_seconds(options.freshness_seconds)},
        "next_source_number": result.next_source_number,
        "validation": [p.to_dict() for p in validation],
        "naive_replay_problems": [p.to_dict() for p in naive_problems],
    }


_UNSAFE_FILENAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def download_filename(conversation_id: str, fmt: str) -> str:
    """``replay-<id>-<format>.json`` with the id reduced to characters safe in a header and on
    every file system (ids are agent-chosen)."""
    safe = _UNSAFE_FILENAME_CHARS.sub("_", conversation_id).strip("._")[:100] or "conversation"
    return f"replay-{safe}-{fmt}.json"


def export_file(document: dict[str, Any], conversation_id: str, fmt: str) -> tuple[str, str]:
    """The document as a file to download: indented for people, and its name."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    return text, download_filename(conversation_id, fmt)
