"""A replay's answer, from the conversation's record to the bytes the faces send: load the rows
(``queries.histories``, with this worker's row memo), replay them (``replay.export``), encode
the export document, through this worker's answer cache (``services.replay_cache``). The API's
``GET .../replay`` and the preview's JSON twin and Download call :func:`answer`; the faces
(``webapp.api.replay``, ``webapp.views.replay.pages``) make the ``Response`` of its chunks.
The preview page and the comparison, which need the replay's objects, call :func:`load` and
:func:`build`.

The fast path (docs/replay.md, "The fast path") lives here, outside the pure core, whose
signatures say only what the rules need:

* the loader's memo of made call rows is this worker's (:func:`load`, ``services.row_memo``);
* the argument texts the loader knows to be JSON objects are handed to the replay's checks
  after building, so they do not parse them again (:func:`build`,
  ``BuiltReplay.note_object_arguments``);
* the encoder leaves out of its walk the payload's message list of an OpenAI format, which is
  text only for every history the loader reads (:func:`loaded_messages_text_only`,
  :func:`dumps_json`).
"""

from __future__ import annotations

from datetime import datetime
from itertools import chain, repeat
from typing import Any, Literal

from flask import current_app
from flask.json.provider import DefaultJSONProvider, JSONProvider

from ..queries.conversations import read_state
from ..queries.histories import LoadedHistory, load_history
from ..queries.records import ConversationRecord
from ..replay.export import BuiltReplay, ReplayQuery, build_replay, export_file
from ..replay.formats import payload_messages
from ..replay.jsonfast import dumps_ascii
from ..tokens import STORED_COUNTER
from .replay_cache import Body, Encoder, cut_at_now, get_cache, next_change, put, render
from .row_memo import get_memo

Variant = Literal["json", "download"]


def load(conversation: ConversationRecord) -> LoadedHistory:
    """The conversation's history as the replay reads it, made with this worker's row memo
    (the rows read back unchanged since its last load are not made again)."""
    return load_history(conversation, memo=get_memo())


def build(
    conversation: ConversationRecord, loaded: LoadedHistory, query: ReplayQuery, now: datetime
) -> BuiltReplay:
    """The replay as the API and the page make it (stored token counts first); its checks take
    the argument texts the loader knows to be objects as such."""
    built = build_replay(
        conversation,
        loaded.history,
        query,
        now=now,
        count_tokens=loaded.token_counter(),
        token_counter=STORED_COUNTER,
    )
    built.note_object_arguments(loaded.object_arguments)
    return built


def answer(
    conversation: ConversationRecord,
    query: ReplayQuery,
    variant: Variant,
    encode: Encoder,
    *,
    now: datetime,
) -> Body:
    """The chunks of the replay's answer, from the cache when it holds (raises the replay's
    ``OptionError`` as ``build_replay`` does). The face sends them as they are, in a list
    (their length is ``sum(map(len, body))``)."""
    cache = get_cache()
    if not cache.enabled:
        built = build(conversation, load(conversation), query, now)
        return (encode(built.document(), built),)
    key = (conversation.id, variant, query)
    state = read_state(conversation.id)
    if state is not None:
        body = cache.get(key, state, conversation, now)
        if body is not None:
            return body
    loaded = load(conversation)
    built = build(conversation, loaded, query, now)
    document = built.document()
    time_bound = query.as_of == "now"
    if state is None or loaded.uncounted:
        return (encode(document, built),)
    if not time_bound:
        body = encode(document, built)
        put(cache, key, state, conversation, ((body,), ()), None, None)
        return (body,)
    cut = cut_at_now(document, built, encode, now)
    if cut is None:
        return (encode(document, built),)
    expires = next_change(loaded.history, built.options.freshness_seconds, now)
    if expires is None or expires > now:
        put(cache, key, state, conversation, cut, now, expires)
    return render(*cut, now)


# --- The encoders ------------------------------------------------------------------------------


def plain_json(provider: JSONProvider, debug: bool) -> bool:
    """A face's JSON ``provider`` (``debug``: its app's) writes what ``jsonfast.dumps_ascii``
    writes (compact, ASCII, keys in order): then the answer is encoded by :func:`encode_json`,
    and may be cached; else the face answers with ``jsonify``."""
    return (
        type(provider) is DefaultJSONProvider
        and provider.ensure_ascii
        and not provider.sort_keys
        and not (provider.compact is False or (provider.compact is None and debug))
    )


def encode_json(document: dict[str, Any], built: BuiltReplay) -> bytes:
    """``jsonify(document)``'s bytes, for a plain provider (:func:`plain_json`), of a replay of
    a history the loader read (:func:`load`)."""
    text_messages = loaded_messages_text_only(built.options.format)
    return dumps_json(document, text_messages=text_messages)


def download_encoder(conversation: ConversationRecord) -> Encoder:
    """The download's bytes: ``export_file``'s text as werkzeug sends a ``str`` body."""

    def encode(document: dict[str, Any], built: BuiltReplay) -> bytes:
        return export_file(document, conversation.external_id, built.query.format)[0].encode()

    return encode


def dumps_json(document: dict[str, Any], *, text_messages: bool) -> bytes:
    """``jsonify(document)``'s bytes by ``jsonfast.dumps_ascii``. ``text_messages``: the
    payload's message list is text only (:func:`text_only_messages`), so the encoder's walk
    leaves it out."""
    walk = without_messages(document) if text_messages else document
    return dumps_ascii(document, default=current_app.json.default, newline=True, walk=walk)


def without_messages(document: dict[str, Any]) -> dict[str, Any]:
    """The export document with an empty message list: what the encoder walks when the
    messages are text only (two shallow copies, nothing else copied)."""
    payload = document["payload"]
    key = "input" if document["format"] == "openai-responses" else "messages"
    return {**document, "payload": {**payload, key: []}}


_TEXT = {str, type(None)}
_CONTAINERS = {list, dict}
# Where each OpenAI format nests in its messages: chat's assistant messages carry a list of calls,
# each call a function object; Responses' items are flat.
_NESTED = {"openai-chat": ("tool_calls", "function"), "openai-responses": ()}


def loaded_messages_text_only(fmt: str) -> bool:
    """:func:`text_only_messages` of the payload of a replay of a history the loader read,
    known without looking: every text of such a history is an exact ``str`` (the driver's text
    columns, the loader's compact JSON), and the OpenAI renderers put only the history's texts
    and strings they make into the message list (tests/test_replay_bytes.py checks
    :func:`text_only_messages` of the payloads of hypothesis histories). Looking would cost
    about what the walk it saves does (docs/replay.md, "The fast path"). Even a value a
    hand-written SQL change could leave in a text column is safe: SQLite stores a number there
    as text, and orjson refuses bytes (then the standard library encodes the whole answer)."""
    return fmt in _NESTED


def text_only_messages(payload: dict[str, Any], fmt: str) -> bool:
    """Whether the payload's message list (``messages``, ``input``) is *text only*: objects
    with ``str`` keys, lists, ``null`` and strings of the exact type ``str`` (no number, no
    other type). Every JSON encoder spells such a list the same way, up to how it escapes
    characters, so ``jsonfast.dumps_ascii`` need not walk it to prove that orjson's bytes are
    the standard library's (the walk of a 10,000-call payload cost more than encoding it).
    An OpenAI payload of a history read from the database always is (the answers rely on that:
    :func:`loaded_messages_text_only`); Anthropic's carry the arguments as objects: never
    vouched for. False: not known.

    The check knows where the OpenAI renderers nest, and looks at one level at a time with
    ``map``, ``set`` and ``list.count`` (no Python loop per value): the level's objects, their
    keys and the types of their values, of which only those under the level's nesting key may
    be containers (the next level). Still, for 10,000 calls it costs most of the walk it would
    save, so the answers do not run it."""
    nested = _NESTED.get(fmt)
    if nested is None:
        return False
    objects = payload_messages(payload, fmt)
    for key in (*nested, None):
        if not set(map(type, objects)) <= {dict}:
            return False
        if not set(map(type, chain.from_iterable(objects))) <= {str}:
            return False
        types = list(map(type, chain.from_iterable(map(dict.values, objects))))
        kinds = set(types)
        if kinds <= _TEXT:
            return True
        if key is None or not kinds <= _TEXT | _CONTAINERS:
            return False
        # Every container is one under the key (each counted once), and they are all lists
        # or all objects: the next level's objects.
        inner = list(filter(None, map(dict.get, objects, repeat(key))))
        if types.count(list) + types.count(dict) != len(inner):
            return False
        inner_kinds = set(map(type, inner))
        if inner_kinds == {list}:
            objects = list(chain.from_iterable(inner))
        elif inner_kinds == {dict}:
            objects = inner
        else:
            return False
    return False  # not reached: the last level has no nesting key
