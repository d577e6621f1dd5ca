"""Load stored conversations as the replay library's plain data objects.

One loader for every reader of stored histories: the replay API and pages load one conversation
(:func:`load_history`), the charts many at once (:func:`load_histories`). Either way it takes
four queries (messages, tool calls, service calls, tool definitions, each
``conversation_id IN (...)``) and groups the rows in Python; the replay itself never touches the
database. The conversations come from ``webapp.queries.conversations``.

What comes with the history depends on what the caller does with it (``tokens``):

* ``None``: the history alone.
* ``"text"`` (the replay): the token counts stored at ingestion keyed by the text they count, as
  the replay's token counter looks a text up there before it tokenizes anything (see
  :meth:`LoadedHistory.token_counter`). With a ``memo`` (the worker's row memo, handed in by
  ``webapp.services.replay_answer``), what was made of call rows that read back unchanged is
  reused.
* ``"row"`` (the charts): the counts keyed by row id, and result texts only where they may be
  a sources list (the one thing the charts read in a result: source compaction). Every other
  result stays in the database and reads as ``""``; its stored count is what the charts need.
  The service calls' stored costs come with it.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import orjson
from sqlalchemy import (
    DateTime,
    Result,
    Select,
    Text,
    case,
    cast,
    func,
    literal,
    select,
    type_coerce,
)
from sqlalchemy.sql.elements import ColumnElement

from ..analytics.records import ServiceCallCost
from ..db import db
from ..models import Message, ServiceCall, ToolDefinition
from ..models import ToolInvocation as ToolRow
from ..replay.history import History
from ..replay.history import Message as HistoryMessage
from ..replay.history import ServiceCall as HistoryServiceCall
from ..replay.history import ToolCall as HistoryToolCall
from ..replay.history import ToolDefinition as HistoryToolDefinition
from ..replay.jsonfast import MAX_DEPTH, dumps
from ..tokens import count_tokens, stored_counter
from .records import ConversationRecord

TokenKeys = Literal["text", "row"]

_T = TypeVar("_T")


def positional_maker(cls: type[_T]) -> Callable[..., _T]:
    """A function that makes ``cls(*values)`` from all of its fields, in order, without the
    frozen dataclass's ``__init__``: that one sets every field through ``object.__setattr__``
    (the frozen check), which cost the loader 1 µs of the 1.8 µs a 12-field ``ToolCall`` takes,
    10 ms for a 10,000-call conversation. The maker writes the slots directly. The instance is
    the same (equal, same fields, still frozen); only for slotted, frozen dataclasses without
    ``__post_init__`` (the rows of ``webapp.replay.history``)."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if tuple(names) != getattr(cls, "__slots__", None) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a plain slotted dataclass")
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for name in names:
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
    # Generated, as dataclasses generates __init__: one call per slot, no loop.
    body = "".join(f"    _set_{name}(obj, {name})\n" for name in names)
    source = f"def make({', '.join(names)}):\n    obj = _new(_cls)\n{body}    return obj\n"
    exec(source, namespace)  # the names are the dataclass's own field names
    maker: Callable[..., _T] = namespace["make"]
    return maker


# The history's frozen rows, made from their fields without the frozen __init__'s per-field
# checks (positional_maker: 1 µs less per call of a long conversation).
_make_call = positional_maker(HistoryToolCall)
_make_service_call = positional_maker(HistoryServiceCall)
_make_message = positional_maker(HistoryMessage)

# Roughly what one made row costs a memo beyond its texts: the row's tuple and small values, the
# ToolCall, the argument dict's containers, the dict slot.
ENTRY_OVERHEAD_BYTES = 600


class Made(NamedTuple):
    """What the loader made of one tool call row (``_replay_calls``), as a memo keeps it."""

    row: tuple[Any, ...]
    call: HistoryToolCall
    response: str | None  # call.response, one attribute lookup nearer
    # The compact argument text the replay sends, its stored (or counted) token count, and
    # whether it is known to be a JSON object jsonfast reads (LoadedHistory.object_arguments).
    compact: str | None
    arguments_tokens: int | None
    response_tokens: int | None
    known_object: bool
    # A count the token pass will store is still NULL (LoadedHistory.uncounted).
    uncounted: bool
    size: int  # entry_bytes


def entry_bytes(response: str | None, arguments_text: str | None, compact: str | None) -> int:
    """About what keeping one made row holds: the texts, the argument dict parsed from them
    (counted as long as its compact text) and the rest (ENTRY_OVERHEAD_BYTES)."""
    size = ENTRY_OVERHEAD_BYTES + len(response or "") + len(arguments_text or "")
    return size + 2 * len(compact or "")


class CallRowMemo(Protocol):
    """What the loader needs of a memo of made call rows (the worker's is
    ``webapp.services.row_memo.RowMemo``): the rows it made of a conversation last time, and
    keeping the ones it made now."""

    def rows(self, conversation_id: int) -> dict[int, Made]:
        """The made rows of the conversation's last load, by call row id (empty if none)."""
        ...

    def keep(self, conversation_id: int, rows: dict[int, Made], size: int) -> None:
        """The made rows of this load (``size``: their ``Made.size`` summed), replacing the
        previous ones."""
        ...


@dataclass(slots=True)
class LoadedHistory:
    history: History
    # tokens="text": text → token count stored at ingestion (results, argument JSON, message
    # contents).
    stored_tokens: dict[str, int] = field(default_factory=dict)
    # The model of the latest assistant message: what texts without a stored count are
    # tokenized for.
    model: str | None = None
    # tokens="row": the same counts by row id, None where ingestion made none. A result stored
    # without a count is estimated from its size, since its text is not loaded.
    argument_tokens: dict[int, int | None] = field(default_factory=dict)
    result_tokens: dict[int, int | None] = field(default_factory=dict)
    message_tokens: dict[int, int | None] = field(default_factory=dict)
    # tokens="row": the cost stored with each service call, in message and round order.
    costs: tuple[ServiceCallCost, ...] = ()
    # tokens="text": compact argument texts known to encode a JSON object that
    # ``jsonfast.loads`` reads (see _json_and_compact): the replay's validation need not parse
    # them again (``BuiltReplay.note_object_arguments``, called by services.replay_answer).
    object_arguments: set[str] = field(default_factory=set)
    # tokens="text": some row waits for the token pass (a count it will store is still NULL),
    # so the answer may change without the conversation's revision moving: the replay cache
    # keeps no answer of it (webapp.services.replay_cache).
    uncounted: bool = False

    def token_counter(self) -> Callable[[str], int]:
        """The replay's token counter (tokens="text"): the stored count of a text, else
        tiktoken's for the model. ``stored_tokens`` is its memo, so the replays of one loaded
        history (a comparison's two sides) share what was counted."""
        return stored_counter(self.stored_tokens, self.model)


def load_history(
    conversation: ConversationRecord, *, memo: CallRowMemo | None = None
) -> LoadedHistory:
    """One conversation as the replay reads it, with its stored counts by text. ``memo``: what
    was made of rows read back unchanged since the conversation's last load with it is reused,
    and what this load made is kept there (the worker's row memo,
    ``webapp.services.row_memo``); None makes everything."""
    return load_histories([conversation], tokens="text", memo=memo)[conversation.id]


def load_histories(
    conversations: Sequence[ConversationRecord],
    *,
    tokens: TokenKeys | None = None,
    memo: CallRowMemo | None = None,
) -> dict[int, LoadedHistory]:
    """The histories of ``conversations`` by row id, in four queries whatever their number and
    size. ``memo``: see :func:`load_history` (the replay's loads only, ``tokens="text"``)."""
    if not conversations:
        return {}
    ids = [c.id for c in conversations]
    # Filled in as the rows arrive; each history is put together once its rows are all read.
    loaded = {c.id: LoadedHistory(_empty_history(c)) for c in conversations}
    messages = _messages(ids, loaded, tokens)
    calls = _tool_calls(ids, loaded, tokens, memo)
    usage = _service_calls(ids, loaded, with_costs=tokens == "row")
    definitions = _definitions(ids)
    for c in conversations:
        loaded[c.id].history = History(
            conversation_id=c.external_id,
            channel=c.channel,
            system_prompt=c.system_prompt,
            tool_definitions=tuple(definitions.get(c.id, ())),
            messages=tuple(
                _make_message(
                    row_id,
                    external_id,
                    role,
                    content,
                    created_at,
                    status,
                    model,
                    tuple(calls.get(row_id, ())),
                    tuple(usage.get(row_id, ())),
                    imported,
                )
                for row_id, external_id, role, content, created_at, status, model, imported in (
                    messages.get(c.id, ())
                )
            ),
        )
    return loaded


def _rows(statement: Select[Any]) -> Result[Any]:
    """The rows of a select of columns, run by Core on the session's connection: the ORM's
    result layer costs more than the rows themselves for the 10,000 calls of a long
    conversation (they are columns, never ORM objects)."""
    return db.session.connection().execute(statement)


def _tuples(statement: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` as the driver's own tuples. Run by Core like ``_rows`` (the
    same compiled-statement cache and events: the tests count it as a query), then fetched from
    the driver's cursor: SQLAlchemy's ``Row`` objects and the loop's ``tuple(row)`` cost 40% on
    top of the fetch for a 10,000-call conversation (32 ms instead of 23 on SQLite). Only for
    selects whose columns need no result processing: times are read with ``_times``, JSON as
    text, and booleans, which SQLite gives as 0 and 1, through ``bool()`` where they are read
    (tests/test_reads_history_tuples.py compares each select's tuples with SQLAlchemy's rows)."""
    result = db.session.connection().execute(statement)
    try:
        rows: list[tuple[Any, ...]] = result.cursor.fetchall()  # type: ignore[union-attr]
    finally:
        result.close()
    return rows


# A run of 20 digits: a number that may be beyond 64 bits, which orjson reads as a float where
# the standard parser reads the integer.
_LONG_NUMBER = re.compile(r"[0-9]{20}")
# A digit followed by ".", "e" or "E": a float may be in the text (every JSON float is spelled
# so). orjson spells some floats otherwise than the standard library (1e-05, 1e16), so only a
# text without one is encoded by orjson. Such a run inside a string only costs the slower path.
# Or a run of 20 digits (_LONG_NUMBER). One branch that starts with the digit: the regex engine
# then skips to the next digit, where "[0-9][.eE]|[0-9]{20}" tried both branches at every
# character (three times as long: ~10 ms of a 10,000-call load).
_MAYBE_FLOAT = re.compile(r"[0-9](?:[.eE]|[0-9]{19})")


def _json_object(text: str) -> Any:
    """A stored JSON column's value from its text. The driver would parse it with
    ``json.loads`` (SQLite's JSON type, psycopg's jsonb loader); orjson takes a third of the
    time and gives the same values. The text is the database's own rendering of what
    ingestion stored (valid JSON, no NaN); what orjson refuses or reads otherwise (an integer
    beyond 64 bits, which it makes a float) is read by the standard parser, as before."""
    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _json_and_compact(text: str) -> tuple[Any, str]:
    """:func:`_json_object` of ``text`` and ``jsonfast.dumps`` of it, the same text. orjson
    encodes it (a tenth of the time) when the text holds no float: with strings, integers,
    true, false and null the two encoders write the same compact text (tests/test_replay_bytes.py
    compares them)."""
    return _json_and_compact_known(text)[:2]


def _json_and_compact_known(text: str) -> tuple[Any, str, bool]:
    """:func:`_json_and_compact`, and whether the compact text is known to be one that
    ``jsonfast.loads`` reads as an object (what the replay's validation checks of every
    arguments string): orjson's encoding of a dict, with no float and no integer of 20 digits
    or more (the text was searched for those), so no lone surrogate (orjson refuses them) and
    nested fewer than ``MAX_DEPTH`` levels (counted by its brackets, strings' included)."""
    if _MAYBE_FLOAT.search(text) is None:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = json.loads(text)
            return value, dumps(value), False
        try:
            compact = orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # nested deeper than orjson encodes
            return value, dumps(value), False
        known = type(value) is dict and compact.count("{") + compact.count("[") < MAX_DEPTH
        return value, compact, known
    value = _json_object(text)
    return value, dumps(value), False


def _utc_from_text(text: str | None) -> datetime | None:
    """A time as SQLite stores it (naive UTC text), as ``UTCDateTime`` reads it. Parsed with
    the offset appended: ten times faster than ``.replace(tzinfo=UTC)``, whose keyword
    argument costs more than the parse, and the same aware datetime (``timezone.utc``)."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text + "+00:00")
    except ValueError:  # a text with an offset of its own
        value = datetime.fromisoformat(text)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_driver_reads_it(column: Any) -> Any:
    # The driver's datetime, without UTCDateTime's result processor.
    return type_coerce(column, DateTime(timezone=True))


def _times() -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """How the loops below read a time column: (the column to select, the function that makes
    the aware UTC datetime of its value). On SQLite the text itself, parsed in one call instead
    of the dialect's parser then ``UTCDateTime``'s (a third of the load of a 10,000-call
    conversation went there); on PostgreSQL the driver's datetime, made UTC by
    ``UTCDateTime.process_result_value`` called here: the loop calls a function per time
    anyway, and SQLAlchemy's processor chain around it is saved (a few ms for the 27,000 times
    of a 10,000-call conversation)."""
    if db.session.get_bind().dialect.name == "sqlite":
        return (lambda column: cast(column, Text)), _utc_from_text
    return _as_driver_reads_it, _utc_from_driver


def _utc_from_driver(value: datetime | None) -> datetime | None:
    """What ``UTCDateTime.process_result_value`` makes of the driver's value."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _empty_history(c: ConversationRecord) -> History:
    return History(c.external_id, c.channel, c.system_prompt, (), ())


def _messages(
    ids: Sequence[int], loaded: dict[int, LoadedHistory], tokens: TokenKeys | None
) -> dict[int, list[tuple[Any, ...]]]:
    """Message rows by conversation, in time order, as (id, external_id, role, content,
    created_at, status, model, imported); stored counts and the latest model noted."""
    time_column, utc = _times()
    rows = _tuples(
        select(
            Message.conversation_id,
            Message.id,
            Message.external_id,
            Message.role,
            Message.content,
            time_column(Message.created_at),
            Message.status,
            Message.model,
            Message.imported,
            Message.content_tokens,
        )
        .where(Message.conversation_id.in_(ids))
        .order_by(Message.created_at, Message.id)
    )
    grouped: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        (conversation_id, row_id, external_id, role, content, created_at, status, model,
         imported, content_tokens) = row  # fmt: skip
        grouped[conversation_id].append(
            (row_id, external_id, role, content, utc(created_at), status, model, bool(imported))
        )
        out = loaded[conversation_id]
        if role == "assistant" and model:
            out.model = model  # rows are in time order: the last one wins
        if tokens == "text":
            if content is not None and content_tokens is not None:
                out.stored_tokens[content] = content_tokens
            elif content and content_tokens is None:  # token_pass.MESSAGE_PENDING
                out.uncounted = True
        elif tokens == "row":
            out.message_tokens[row_id] = content_tokens
    return grouped


def _list_like(column: Any) -> ColumnElement[Any]:
    """The text only when it may be a sources list; NULL otherwise."""
    first = func.substr(func.ltrim(column, " \t\r\n"), 1, 1)
    return case((first == literal("["), column), else_=None)


def _tool_calls(
    ids: Sequence[int],
    loaded: dict[int, LoadedHistory],
    tokens: TokenKeys | None,
    memo: CallRowMemo | None,
) -> dict[int, list[HistoryToolCall]]:
    """Tool calls by message row id, in (round, sequence) order; stored counts noted."""
    lists_only = tokens == "row"
    if lists_only:
        # Only texts that may be sources lists leave the database (see the module docstring).
        response: list[Any] = [
            case(
                (ToolRow.response_tokens.is_(None), ToolRow.response),
                else_=_list_like(ToolRow.response),
            ).label("response"),
            ToolRow.response.is_not(None).label("has_response"),
            ToolRow.response_bytes,
        ]
    else:
        response = [ToolRow.response, literal(None), literal(None)]
    time_column, utc = _times()
    columns = (
        Message.conversation_id,
        ToolRow.message_id,
        ToolRow.id,
        ToolRow.external_tool_call_id,
        ToolRow.function_name,
        # JSON as text, parsed below: see _json_object.
        cast(ToolRow.arguments, Text),
        ToolRow.round_index,
        ToolRow.sequence_index,
        time_column(ToolRow.created_at),
        time_column(ToolRow.response_created_at),
        ToolRow.is_error,
        cast(ToolRow.redactions, Text),
        ToolRow.arguments_tokens,
        ToolRow.response_tokens,
        Message.model,
        *response,
        ToolRow.stamp,
    )
    if tokens == "text":
        if memo is not None:
            rows = _changed_rows(ids, columns, memo)
        else:
            rows = _tuples(_calls_of(ids, columns))
        return _replay_calls(rows, loaded, utc, memo)
    rows = _tuples(_calls_of(ids, columns))
    calls: dict[int, list[HistoryToolCall]] = defaultdict(list)
    # Tuples unpacked rather than row attributes: this loop runs once per call, 10,000 times for
    # a long conversation (the charts').
    for row in rows:
        (conversation_id, message_id, row_id, _, _, arguments_json, _, _, _, _, _, _,
         arguments_tokens, response_tokens, message_model, text, has_response,
         response_bytes, _) = row  # fmt: skip
        arguments = None if arguments_json is None else _json_object(arguments_json)
        if lists_only:
            if response_tokens is None and text is not None:
                # Not counted yet by the token pass: counted as the pass will count it; the
                # text is kept only where it may be a sources list.
                response_tokens = count_tokens(text, message_model)
                if not text.lstrip(" \t\r\n").startswith("["):
                    text = None
            if text is None and has_response:
                text = ""
        calls[message_id].append(_history_call(row, utc, arguments, text, None))
        if lists_only:
            if response_tokens is None and has_response and response_bytes is not None:
                # Ingested without a count: a quarter of its size stands in (the text stays
                # put).
                response_tokens = math.ceil(response_bytes / 4)
            if arguments_tokens is None and arguments is not None:
                arguments_tokens = count_tokens(dumps(arguments), message_model)
            out = loaded[conversation_id]
            out.argument_tokens[row_id] = arguments_tokens
            out.result_tokens[row_id] = response_tokens
    return calls


def _calls_of(ids: Sequence[int], columns: Sequence[Any]) -> Select[Any]:
    """``columns`` of the tool calls of conversations ``ids``, each message's calls in
    (round, sequence) order."""
    return (
        select(*columns)
        .join(Message, Message.id == ToolRow.message_id)
        .where(Message.conversation_id.in_(ids))
        # Each message's calls in (round, sequence) order, the messages in the order of their
        # index (conversation, time, id): SQLite then reads the calls in that order through the
        # two indexes instead of sorting them, 10 MB of results included, in a temporary tree
        # (a third of the query's time for the bench's conversation). The calls are grouped by
        # message, so the order of the messages does not matter.
        .order_by(
            Message.conversation_id,
            Message.created_at,
            Message.id,
            ToolRow.round_index,
            ToolRow.sequence_index,
        )
    )


# What a load with the memo reads of every call first: enough to find the memo's copy and to
# tell whether the row changed since.
_KEY_COLUMNS = (Message.conversation_id, ToolRow.message_id, ToolRow.id, ToolRow.stamp)
# Above this many rows to read whole, they are read by the whole select, not by id (a bound
# far under SQLite's 32,766 parameters, and where an IN list stops paying).
MAX_READ_BY_ID = 2000


def _changed_rows(ids: Sequence[int], columns: Sequence[Any], memo: CallRowMemo) -> list[Any]:
    """The rows of ``_calls_of(ids, columns)``, with the rows the memo holds unchanged read as
    the memo's copy: a first select reads each call's (conversation, message, id, stamp) only,
    a second the whole of the rows whose stamp moved (or that the memo does not hold). For a
    10,000-call conversation with one call appended, that reads 10,000 small rows and one
    large one instead of 10 MB of texts (23 ms of a replay's load on SQLite)."""
    previous = {i: memo.rows(i) for i in ids}
    if not any(previous.values()):
        return _tuples(_calls_of(ids, columns))
    keys = _tuples(_calls_of(ids, _KEY_COLUMNS))
    rows: list[Any] = []
    wanted: dict[int, int] = {}  # row id -> its index in rows
    for conversation_id, _, row_id, stamp in keys:
        made = previous[conversation_id].get(row_id)
        if stamp is not None and made is not None and made.row[-1] == stamp and not made.uncounted:
            rows.append(made.row)
        else:
            wanted[row_id] = len(rows)
            rows.append(None)
    if len(wanted) > MAX_READ_BY_ID:
        return _tuples(_calls_of(ids, columns))
    if wanted:
        for row in _tuples(_calls_of(ids, columns).where(ToolRow.id.in_(list(wanted)))):
            index = wanted.get(row[2])
            if index is not None:
                rows[index] = row
        if any(rows[i] is None for i in wanted.values()):
            # A row deleted or moved between the two selects (PostgreSQL reads each statement at
            # its own moment): read all of them in one statement.
            return _tuples(_calls_of(ids, columns))
    return rows


def _history_call(
    row: Sequence[Any],
    utc: Callable[[Any], Any],
    arguments: Any,
    text: str | None,
    compact: str | None,
) -> HistoryToolCall:
    """The replay's ``ToolCall`` of a row of ``_tool_calls``' select, with its arguments,
    result text and compact arguments JSON as the caller made them."""
    return _make_call(
        row[2],  # id
        row[3],  # external_tool_call_id
        row[4],  # function_name
        arguments,
        row[6],  # round_index
        row[7],  # sequence_index
        utc(row[8]),  # created_at
        text,
        utc(row[9]),  # response_created_at
        bool(row[10]),  # is_error (SQLite: 0 or 1)
        _was_redacted(row[11]),
        compact,
    )


def _was_redacted(redactions: str | None) -> bool:
    # A list of what was redacted: JSON null or [] when nothing was.
    if redactions is None or redactions in ("null", "[]"):
        return False
    return bool(_json_object(redactions))


def _replay_calls(
    rows: Sequence[Any],
    loaded: dict[int, LoadedHistory],
    utc: Callable[[Any], Any],
    memo: CallRowMemo | None,
) -> dict[int, list[HistoryToolCall]]:
    """The replay's tool calls (tokens="text") by message row id; the stored counts, compact
    argument texts and pending counts noted in ``loaded``. A row read back equal to what the
    worker's row memo made an object of last time reuses it (webapp.services.row_memo): the
    Python below then runs only for rows new or changed since the conversation's last replay
    (``memo`` None: every row is made)."""
    calls: dict[int, list[HistoryToolCall]] = defaultdict(list)
    made_now: dict[int, dict[int, Made]] = {}
    # The rows come grouped by conversation: what is kept for the current one, in locals.
    current = None
    previous: dict[int, Made] = {}
    made_rows: dict[int, Made] = {}
    out = LoadedHistory(History("", None, None, (), ()))
    for values in rows:
        conversation_id, message_id, row_id = values[0], values[1], values[2]
        if conversation_id != current:
            current, out = conversation_id, loaded[conversation_id]
            previous = memo.rows(conversation_id) if memo is not None else {}
            made_rows = made_now.setdefault(conversation_id, {})
        made = previous.get(row_id)
        if made is None or (made.row is not values and made.row != values):
            made = _make_replay_call(values, utc)
        made_rows[row_id] = made
        calls[message_id].append(made.call)
        if made.uncounted:
            out.uncounted = True
        if made.response is not None:
            out.stored_tokens[made.response] = made.response_tokens  # type: ignore[assignment]
        if made.compact is not None:
            out.stored_tokens[made.compact] = made.arguments_tokens  # type: ignore[assignment]
            if made.known_object:
                out.object_arguments.add(made.compact)
    if memo is not None:
        for conversation_id, kept in made_now.items():
            memo.keep(conversation_id, kept, sum(m.size for m in kept.values()))
    return calls


def _make_replay_call(values: tuple[Any, ...], utc: Callable[[Any], Any]) -> Made:
    """What the replay reads of one tool call row (the columns of ``_tool_calls``' select)."""
    (_, _, _, _, _, arguments_json, _, _, _, _, _, _, arguments_tokens, response_tokens,
     message_model, text, _, _, _) = values  # fmt: skip
    # The replay's compact text of the arguments: the key of their stored count, and what the
    # replay sends (made once here rather than again by the replay and its checks).
    compact = None
    known = False
    arguments = None
    if arguments_json is not None:
        arguments, compact, known = _json_and_compact_known(arguments_json)
        if arguments is None:  # JSON null: no arguments, as before
            compact = None
            known = False
    # token_pass.PENDING: the pass will store a count here.
    uncounted = (arguments_json is not None and arguments_tokens is None) or (
        text is not None and response_tokens is None
    )
    # Not counted yet by the token pass: counted as the pass will (the message's model).
    if text is not None and response_tokens is None:
        response_tokens = count_tokens(text, message_model)
    # Ingestion counted the compact JSON the replay sends. PostgreSQL's JSONB may hand the
    # keys back in another order: same tokens, so the count still holds.
    if compact is not None and arguments_tokens is None:
        arguments_tokens = count_tokens(compact, message_model)
    call = _history_call(values, utc, arguments, text, compact)
    size = entry_bytes(text, arguments_json, compact)
    return Made(
        values, call, text, compact, arguments_tokens, response_tokens, known, uncounted, size
    )


def _service_calls(
    ids: Sequence[int], loaded: dict[int, LoadedHistory], *, with_costs: bool
) -> dict[int, list[HistoryServiceCall]]:
    """Reported usage by message row id, in round order; stored costs noted if asked for."""
    # Columns, not ORM objects: building thousands of instrumented instances costs more than
    # the query itself.
    time_column, utc = _times()
    columns: list[Any] = [
        Message.conversation_id,
        ServiceCall.message_id,
        ServiceCall.round_index,
        ServiceCall.model,
        ServiceCall.input_tokens,
        ServiceCall.output_tokens,
        ServiceCall.cached_tokens,
        time_column(ServiceCall.created_at).label("created_at"),
    ]
    if with_costs:
        columns += [
            ServiceCall.provider,
            ServiceCall.cost_usd,
            ServiceCall.price_source,
            ServiceCall.price_version,
        ]
    # Last, so the positions above stay: the round's own text, replayed before its calls.
    columns.append(ServiceCall.content)
    if with_costs:
        # The costs are listed in (message id, round) order.
        order: tuple[Any, ...] = (ServiceCall.message_id, ServiceCall.round_index)
    else:
        # Without costs (the replay) only each message's own list is in round order: the rows
        # are read in the indexes' order (conversation, time, id; then message, round), so
        # SQLite does not sort them in a temporary tree, and the cost columns (a Decimal made
        # per row) stay in the database. 5,000 service calls: ~30 ms less.
        order = (
            Message.conversation_id,
            Message.created_at,
            Message.id,
            ServiceCall.round_index,
        )
    statement = (
        select(*columns)
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.conversation_id.in_(ids))
        .order_by(*order)
    )
    # The costs need SQLAlchemy's processing (a Decimal from SQLite's number); without them
    # every column is read as the driver gives it.
    rows: Sequence[Any] = _rows(statement).all() if with_costs else _tuples(statement)
    usage: dict[int, list[HistoryServiceCall]] = defaultdict(list)
    costs: dict[int, list[ServiceCallCost]] = defaultdict(list)
    for row in rows:
        (conversation_id, message_id, round_index, model, input_tokens, output_tokens,
         cached_tokens, created_at) = row[:8]  # fmt: skip
        usage[message_id].append(
            _make_service_call(
                round_index,
                model,
                input_tokens,
                output_tokens,
                cached_tokens,
                utc(created_at),
                row[-1],
            )
        )
        if with_costs:
            costs[conversation_id].append(_cost(row))
    for conversation_id, conversation_costs in costs.items():
        loaded[conversation_id].costs = tuple(conversation_costs)
    return usage


def _cost(row: Any) -> ServiceCallCost:
    return ServiceCallCost(
        message_row_id=row.message_id,
        round_index=row.round_index,
        provider=row.provider,
        cost_usd=None if row.cost_usd is None else Decimal(row.cost_usd),
        price_source=row.price_source,
        price_version=row.price_version,
    )


def _definitions(ids: Iterable[int]) -> dict[int, list[HistoryToolDefinition]]:
    """Tool definitions by conversation, by name."""
    rows = db.session.execute(
        select(
            ToolDefinition.conversation_id,
            ToolDefinition.name,
            ToolDefinition.description,
            ToolDefinition.parameters,
        )
        .where(ToolDefinition.conversation_id.in_(ids))
        .order_by(ToolDefinition.conversation_id, ToolDefinition.name)
    )
    grouped: dict[int, list[HistoryToolDefinition]] = defaultdict(list)
    for d in rows:
        grouped[d.conversation_id].append(
            HistoryToolDefinition(d.name, d.description, d.parameters)
        )
    # By code point, whatever the database's collation: the replay lists renamed tools that way
    # too (see webapp.replay.build), and SQLite and PostgreSQL then agree.
    for definitions in grouped.values():
        definitions.sort(key=attrgetter("name"))
    return grouped
