"""The replay API's answer is byte for byte what it was before it was made fast (issue 10).

Two changes could alter it: the answer is encoded by ``jsonfast.dumps_ascii`` (orjson, after a
check that nothing is spelled differently) instead of Flask's ``jsonify``, and the history is
loaded by a faster loader (columns by Core, JSON by orjson, SQLite times parsed directly, the
arguments' compact text made once). Each is compared with the old path:

* the encoder with ``json.dumps`` on arbitrary JSON values, and with ``jsonify`` on the export
  documents of hypothesis histories in every format;
* the whole API answer, for the demo conversations stored in the database (SQLite and
  PostgreSQL), with ``jsonify`` of the document built from a history read through the ORM's
  typed columns, as the loader read it before.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest
from flask import jsonify
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_strategies import histories, options
from sqlalchemy import select

from webapp import create_app
from webapp.api.replay import json_response
from webapp.db import db
from webapp.demo import load_demo
from webapp.models import Conversation, Message, ServiceCall, ToolDefinition, ToolInvocation
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import (
    _MAYBE_FLOAT,
    _json_and_compact,
    _json_and_compact_known,
    _json_object,
)
from webapp.replay import ReplayOptions, jsonfast, replay
from webapp.replay.export import ReplayQuery, build_replay, export_document
from webapp.replay.history import History
from webapp.replay.history import Message as HMessage
from webapp.replay.history import ServiceCall as HServiceCall
from webapp.replay.history import ToolCall as HToolCall
from webapp.replay.history import ToolDefinition as HToolDefinition
from webapp.replay.jsonfast import MAX_DEPTH, dumps, dumps_ascii
from webapp.services.replay_answer import text_only_messages
from webapp.tokens import STORED_COUNTER, stored_counter

# --- The encoder ------------------------------------------------------------------------------

TEXT = st.text(
    st.characters(codec=None, exclude_categories=()),  # surrogates, controls, astral: all
    max_size=12,
) | st.sampled_from(["", "é", "\u2028", "\ud800", "😀", '"\\/', "\x00\x1f\x7f", "1e-05"])
NUMBERS = (
    st.integers()
    | st.integers(min_value=2**63 - 5, max_value=2**64 + 5)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e-05, 1e16, 1e15, 0.0001, -0.0, 5e-324, 1.7976931348623157e308])
)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
KEYS = TEXT | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(width=16)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


def standard(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@settings(max_examples=600, deadline=None)
@given(VALUES)
def test_dumps_ascii_is_the_standard_librarys_encoding(value):
    assert dumps_ascii(value) == standard(value)
    assert dumps_ascii(value, newline=True) == standard(value) + b"\n"


STORED_NUMBERS = (
    st.integers()
    | st.integers(min_value=2**63 - 5, max_value=2**64 + 5)
    | st.integers(min_value=10**19, max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e-05, 1e16, 1e15, 0.0001, -0.0, 5e-324, 1.7976931348623157e308])
)
# What a JSON column can hold: string keys, no NaN or Infinity (ingestion refuses them).
STORED_VALUES = st.recursive(
    st.none() | st.booleans() | STORED_NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=1000, deadline=None)
@given(STORED_VALUES, st.booleans())
def test_the_loader_reads_stored_json_as_the_standard_parser_does(value, compact):
    # The text as SQLite's JSON type stores it (json.dumps), or compact; the loader's value
    # and compact text are the standard parser's and jsonfast.dumps of it, big integers and
    # floats included.
    text = json.dumps(value, separators=(",", ":") if compact else None)
    expected = json.loads(text)
    parsed, encoded = _json_and_compact(text)
    assert encoded == dumps(expected)
    assert dumps(parsed) == dumps(expected)
    assert dumps(_json_object(text)) == dumps(expected)


@settings(max_examples=1000, deadline=None)
@given(st.dictionaries(TEXT, STORED_VALUES, max_size=4), st.booleans())
def test_arguments_the_loader_vouches_for_are_objects_to_the_validator(value, compact):
    # The loader tells the replay's validation which compact arguments texts encode an object
    # (it then does not parse them again): each must be one jsonfast.loads reads as an object,
    # as the validator's own check would find.
    text = json.dumps(value, separators=(",", ":") if compact else None)
    _, encoded, known = _json_and_compact_known(text)
    if known:
        assert isinstance(jsonfast.loads(encoded), dict)


@pytest.mark.parametrize("depth", [1, 150, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 20])
def test_arguments_nested_too_deep_for_the_validator_are_not_vouched_for(depth):
    text = '{"a":' * depth + "1" + "}" * depth
    _, encoded, known = _json_and_compact_known(text)
    try:
        parsed = jsonfast.loads(encoded)
    except ValueError:
        parsed = None
    assert not known or isinstance(parsed, dict)
    assert known == (depth < MAX_DEPTH)


@settings(max_examples=2000, deadline=None)
@given(
    st.lists(
        st.sampled_from(["1" * 19, "2" * 20, "3", "45", ".", "e", "E", "x", '"', "{", ", "]),
        max_size=12,
    ).map("".join)
)
def test_the_loaders_float_guard_finds_what_the_two_branch_pattern_found(text):
    # _MAYBE_FLOAT starts with the digit so the engine skips to the next one; it must match
    # exactly where "a digit then . e or E, or 20 digits in a row" does.
    two_branches = re.search(r"[0-9][.eE]|[0-9]{20}", text) is not None
    assert (_MAYBE_FLOAT.search(text) is not None) == two_branches


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_without_an_exponent_are_spelled_alike(value):
    """What dumps_ascii relies on to let orjson encode a float at all."""
    spelled = repr(value)
    if "e" not in spelled:
        assert orjson.dumps(value) == spelled.encode()


def test_what_is_spelled_otherwise_takes_the_standard_path():
    for value in (
        {"t": 1e-05},
        {"t": 1e16},
        {"t": math.nan},
        {"t": -math.inf},
        {"n": 2**64},
        {1: "non-str key"},
        {"s": "\ud800"},
        {"d": datetime(2025, 1, 1, tzinfo=UTC)},
        defaultdict(list, {"sub": 1}),
    ):
        default = (lambda o: o.isoformat()) if "d" in value else None
        assert dumps_ascii(value, default=default) == json.dumps(
            value, separators=(",", ":"), default=default
        ).encode()
    with pytest.raises(TypeError):
        dumps_ascii({"d": object()})


# --- The answer: export documents of hypothesis histories ---------------------------------------


@pytest.fixture(scope="module")
def plain_app(tmp_path_factory):
    path = tmp_path_factory.mktemp("bytes") / "t.db"
    return create_app({"DATABASE_URL": f"sqlite:///{path}", "SECRET_KEY": "t"})


class _Conversation:
    external_id = "c-é"
    title = "Ünïcode title 😀"
    channel = None
    freshness_seconds = None


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_the_answer_is_jsonifys_bytes_for_hypothesis_histories(plain_app, history, data):
    opts = data.draw(options())
    result = replay(history, opts)
    document = export_document(
        _Conversation(),
        ReplayQuery(format=opts.format),
        opts,
        result,
        validation=[],
        naive_problems=[],
        token_counter="heuristic",
    )
    with plain_app.app_context():
        expected = jsonify(document).get_data()
        new = json_response(document)
        assert new.get_data() == expected
        assert new.content_length == len(new.get_data())
        assert new.mimetype == "application/json"
        # As the API sends it: the encoder's walk leaves out the messages the replay vouched
        # for (every OpenAI payload of a well-typed history).
        text_messages = text_only_messages(result.payload, opts.format)
        assert text_messages == (opts.format != "anthropic")
        vouched = json_response(document, text_messages=text_messages)
        assert vouched.get_data() == expected


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_vouched_messages_keep_jsonifys_bytes_whatever_their_texts(plain_app, history, data):
    """Any text (lone surrogates, controls, DEL, astral characters, "1e-05") and texts of
    another type (a float with an exponent, NaN, an integer beyond 64 bits, a str subclass)
    where a history's types say str: the renderer does not vouch for those, and the answer
    is still jsonify's."""
    odd = st.sampled_from([1e-05, float("nan"), 2**70, _Str("x"), 1.5])
    texts = TEXT | odd

    def retyped(c: HToolCall) -> HToolCall:
        return replace(
            c,
            external_id=data.draw(st.just(c.external_id) | texts),
            response=data.draw(st.just(c.response) | texts),
            function_name=data.draw(st.just(c.function_name) | texts),
        )

    messages = tuple(
        replace(
            m,
            content=data.draw(st.just(m.content) | texts),
            tool_calls=tuple(retyped(c) for c in m.tool_calls),
        )
        for m in history.messages
    )
    history = replace(history, messages=messages)
    opts = data.draw(options())
    try:
        result = replay(history, opts)
    except (TypeError, AttributeError, ValueError):
        return  # a text the core itself cannot handle (a lone surrogate in an id it hashes)
    document = export_document(
        _Conversation(),
        ReplayQuery(format=opts.format),
        opts,
        result,
        validation=[],
        naive_problems=[],
        token_counter="heuristic",
    )
    with plain_app.app_context():
        try:
            expected = jsonify(document).get_data()
        except (TypeError, ValueError):
            return  # jsonify cannot send it either
        text_messages = text_only_messages(result.payload, opts.format)
        vouched = json_response(document, text_messages=text_messages)
        assert vouched.get_data() == expected


class _Str(str):
    """A str subclass: orjson hands it to the standard path."""


def test_a_text_of_another_type_is_not_vouched_for(plain_app) -> None:
    h = HToolCall(1, "c", "f", {}, 0, 0, LOADED_AT, _Str("ok"), LOADED_AT)
    message = HMessage(2, "a", "assistant", None, LOADED_AT, tool_calls=(h,))
    history = History("c", None, None, (), (message,))
    clean = replace(history, messages=(replace(message, tool_calls=(replace(h, response="ok"),)),))
    for fmt in ("openai-chat", "openai-responses"):
        opts = ReplayOptions(format=fmt, freshness_seconds=None, trim_trailing=False)
        assert not text_only_messages(replay(history, opts).payload, fmt)
        assert text_only_messages(replay(clean, opts).payload, fmt)


# --- The answer through the API, for stored rows ------------------------------------------------

LOADED_AT = datetime(2025, 3, 1, 12, tzinfo=UTC)
AS_OF = "2100-01-01T00:00:00Z"  # after every stored row: everything is replayed


def history_as_the_orm_reads_it(conversation_id: int, record) -> tuple[History, dict, str]:
    """The history, its stored counts by text and the latest model, read through the ORM's
    typed columns (SQLAlchemy's JSON and UTCDateTime processing), as the loader did before."""
    messages = db.session.scalars(
        select(Message)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.created_at, Message.id)
    ).all()
    stored: dict[str, int] = {}
    model = None
    built = []
    for m in messages:
        if m.role == "assistant" and m.model:
            model = m.model
        if m.content is not None and m.content_tokens is not None:
            stored[m.content] = m.content_tokens
        calls = db.session.scalars(
            select(ToolInvocation)
            .where(ToolInvocation.message_id == m.id)
            .order_by(ToolInvocation.round_index, ToolInvocation.sequence_index)
        ).all()
        for c in calls:
            if c.response is not None and c.response_tokens is not None:
                stored[c.response] = c.response_tokens
            if c.arguments is not None and c.arguments_tokens is not None:
                stored[dumps(c.arguments)] = c.arguments_tokens
        usage = db.session.scalars(
            select(ServiceCall)
            .where(ServiceCall.message_id == m.id)
            .order_by(ServiceCall.round_index)
        ).all()
        built.append(
            HMessage(
                m.id,
                m.external_id,
                m.role,
                m.content,
                m.created_at,
                m.status,
                m.model,
                tuple(
                    HToolCall(
                        c.id,
                        c.external_tool_call_id,
                        c.function_name,
                        c.arguments,
                        c.round_index,
                        c.sequence_index,
                        c.created_at,
                        c.response,
                        c.response_created_at,
                        c.is_error,
                        bool(c.redactions),
                    )
                    for c in calls
                ),
                tuple(
                    HServiceCall(
                        s.round_index,
                        s.model,
                        s.input_tokens,
                        s.output_tokens,
                        s.cached_tokens,
                        s.created_at,
                        s.content,
                    )
                    for s in usage
                ),
                m.imported,
            )
        )
    definitions = db.session.scalars(
        select(ToolDefinition).where(ToolDefinition.conversation_id == conversation_id)
    ).all()
    history = History(
        record.external_id,
        record.channel,
        record.system_prompt,
        tuple(
            sorted(
                (HToolDefinition(d.name, d.description, d.parameters) for d in definitions),
                key=lambda d: d.name,
            )
        ),
        tuple(built),
    )
    return history, stored, model


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic"])
def test_the_api_answer_is_the_old_paths_bytes_for_stored_rows(app, client, project_key, fmt):
    load_demo(app, project_key.slug, now=LOADED_AT)
    with app.app_context():
        rows = db.session.execute(
            select(Conversation.id, Conversation.external_id).where(
                Conversation.project_id == project_key.project_id
            )
        ).all()
    assert len(rows) >= 5
    params = {"format": fmt, "as_of": AS_OF, "freshness": "off"}
    query = ReplayQuery(**params)
    for row_id, cid in rows:
        answer = client.get(
            f"/api/v1/conversations/{cid}/replay",
            query_string=params,
            headers=project_key.headers,
        )
        assert answer.status_code == 200, answer.get_json()
        with app.test_request_context():
            record = find_conversation(project_key.project_id, external_id=cid)
            history, stored, model = history_as_the_orm_reads_it(row_id, record)
            built = build_replay(
                record,
                history,
                query,
                now=LOADED_AT,
                count_tokens=stored_counter(stored, model),
                token_counter=STORED_COUNTER,
            )
            old = jsonify(built.document()).get_data()
        assert answer.get_data() == old, cid
