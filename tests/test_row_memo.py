"""The replay loader's row memo (webapp.queries.row_memo): what a worker made of a tool call row
is reused only while the row reads back the same, whatever changed it, so a load with the memo
is always the load without it. On SQLite and PostgreSQL (the ``app`` fixture); the hypothesis
state machine of tests/test_replay_cache.py checks it on every write path too (its oracle loads
without the memo).
"""

from __future__ import annotations

import sqlalchemy as sa

from webapp.db import db
from webapp.ingest.token_pass import MESSAGES, count_pending
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import LoadedHistory, load_history
from webapp.queries.row_memo import Made, RowMemo, get_memo

BASE = "/api/v1/conversations"


def _call(n: int, response: str) -> dict:
    return {
        "id": f"call_{n}",
        "name": "search",
        "arguments": {"q": f"query {n}", "page": n},
        "created_at": f"2026-01-01T00:00:0{n}Z",
        "response": {"content": response, "created_at": f"2026-01-01T00:00:0{n}.5Z"},
    }


def _store(client, key) -> None:
    body = {
        "user": {"id": "u1", "content": "Hi", "created_at": "2026-01-01T00:00:00Z"},
        "assistant": {
            "id": "a1",
            "content": "Done.",
            "created_at": "2026-01-01T00:00:00.5Z",
            "rounds": [{"calls": [_call(n, f"result {n}") for n in (1, 2, 3)]}],
        },
    }
    assert client.post(f"{BASE}/c1/turns", json=body, headers=key.headers).status_code == 201
    count_pending()
    count_pending(kind=MESSAGES)


def _load(project_id: int, *, reuse: bool = True) -> LoadedHistory:
    conversation = find_conversation(project_id, external_id="c1")
    assert conversation is not None
    return load_history(conversation, reuse=reuse)


def _same(a: LoadedHistory, b: LoadedHistory) -> None:
    assert a.history == b.history
    assert [c.arguments_json for m in a.history.messages for c in m.tool_calls] == [
        c.arguments_json for m in b.history.messages for c in m.tool_calls
    ]
    assert a.stored_tokens == b.stored_tokens
    assert a.object_arguments == b.object_arguments
    assert a.uncounted == b.uncounted


def _calls(loaded: LoadedHistory) -> dict[str, object]:
    return {c.external_id: c for m in loaded.history.messages for c in m.tool_calls}


def test_rows_read_back_the_same_are_reused_and_changed_ones_made_again(
    app, client, project_key
):
    with app.app_context():
        _store(client, project_key)
        project_id = project_key.project_id
        first = _calls(_load(project_id))
        db.session.remove()
        # Changed behind the API's back: no revision bump, no trigger; only the row differs.
        db.session.execute(
            sa.text(
                "UPDATE tool_invocation SET response = 'changed by hand', response_tokens = 7"
                " WHERE external_tool_call_id = 'call_2'"
            )
        )
        db.session.execute(
            sa.text(
                "UPDATE tool_invocation SET arguments_tokens = NULL"
                " WHERE external_tool_call_id = 'call_3'"
            )
        )
        db.session.commit()
        again = _load(project_id)
        _same(again, _load(project_id, reuse=False))
        calls = _calls(again)
        assert calls["call_1"] is first["call_1"]  # unchanged: the object made last time
        assert calls["call_2"].response == "changed by hand"
        assert again.stored_tokens["changed by hand"] == 7
        assert again.uncounted  # call_3's count is pending again
        assert calls["call_3"] is not first["call_3"]


def test_a_row_id_given_again_is_read_as_the_new_row_and_a_deleted_row_leaves(
    app, client, project_key
):
    with app.app_context():
        _store(client, project_key)
        project_id = project_key.project_id
        before = _load(project_id)
        row = db.session.execute(
            sa.text(
                "SELECT id, message_id, project_id FROM tool_invocation"
                " WHERE external_tool_call_id = 'call_3'"
            )
        ).one()
        db.session.remove()
        # SQLite gives a deleted last row's id to the next row: here it is given explicitly, on
        # both databases, to a row with other values, between two loads.
        db.session.execute(sa.text("DELETE FROM tool_invocation WHERE id = :id"), {"id": row.id})
        db.session.execute(
            sa.text(
                "INSERT INTO tool_invocation (id, project_id, message_id, round_index,"
                " sequence_index, external_tool_call_id, function_name, arguments, created_at,"
                " response, is_error, arguments_tokens, response_tokens, token_method)"
                " SELECT :id, :project_id, :message_id, 0, 2, 'call_3', 'lookup', NULL,"
                " created_at, 'a new row', :false, NULL, 3, token_method"
                " FROM tool_invocation WHERE external_tool_call_id = 'call_1'"
            ),
            {
                "id": row.id,
                "project_id": row.project_id,
                "message_id": row.message_id,
                "false": False,
            },
        )
        db.session.commit()
        after = _load(project_id)
        _same(after, _load(project_id, reuse=False))
        call = _calls(after)["call_3"]
        assert (call.function_name, call.response, call.arguments) == ("lookup", "a new row", None)
        assert call is not _calls(before)["call_3"]

        db.session.remove()
        db.session.execute(sa.text("DELETE FROM tool_invocation WHERE id = :id"), {"id": row.id})
        db.session.commit()
        without = _load(project_id)
        _same(without, _load(project_id, reuse=False))
        assert set(_calls(without)) == {"call_1", "call_2"}
        conversation = find_conversation(project_id, external_id="c1")
        assert row.id not in get_memo(app).rows(conversation.id)  # not held any more


def test_the_memo_is_bounded_and_keeps_the_latest_load_of_a_conversation():
    def made(size: int) -> dict[int, Made]:
        entry = Made((), None, None, None, None, None, False, False, size)  # type: ignore[arg-type]
        return {1: entry}

    memo = RowMemo(max_bytes=1000)
    memo.keep(1, made(400), 400)
    memo.keep(2, made(400), 400)
    assert memo.rows(1) and memo.rows(2)
    memo.keep(3, made(400), 400)  # over the bound: the least recently kept goes
    assert not memo.rows(1) and memo.rows(2) and memo.rows(3)
    memo.keep(2, made(100), 100)  # a new load replaces the previous one, size included
    memo.keep(4, made(500), 500)
    assert memo.rows(2) and memo.rows(3) and memo.rows(4)
    memo.keep(5, made(1001), 1001)  # larger than the whole bound: not kept
    assert not memo.rows(5) and memo.rows(4)
    memo.keep(4, made(1001), 1001)  # and its previous load is dropped, not left stale
    assert not memo.rows(4)


def test_no_memo_when_the_replay_cache_is_off(app):
    app.config["REPLAY_CACHE_MB"] = 0
    app.extensions.pop("row_memo", None)
    assert get_memo(app) is None
