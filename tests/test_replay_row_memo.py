"""The replay loader's row memo (webapp.services.row_memo): what a worker made of a tool call row
is reused only while the row reads back the same, whatever changed it, so a load with the memo
is always the load without it. On SQLite and PostgreSQL (the ``app`` fixture); the hypothesis
state machine of tests/test_replay_cache.py checks it on every write path too (its oracle loads
without the memo). The loader tells an unchanged row by its stamp (``tool_invocation.stamp``),
which every write to the row changes, whatever path writes it.
"""

from __future__ import annotations

import sqlalchemy as sa
from api_support import tool_item

from webapp.db import db
from webapp.ingest.token_pass import MESSAGES, count_pending
from webapp.queries import histories
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import LoadedHistory, Made, load_history
from webapp.services.row_memo import RowMemo, get_memo

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
    return load_history(conversation, memo=get_memo() if reuse else None)


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


def test_rows_read_back_the_same_are_reused_and_changed_ones_made_again(app, client, project_key):
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


def _stamps(app) -> dict[str, int | None]:
    with app.app_context():
        rows = db.session.execute(
            sa.text("SELECT external_tool_call_id, stamp FROM tool_invocation")
        ).all()
        db.session.remove()
    return dict(rows)  # type: ignore[arg-type]


def _post_tools(client, key, tools: list[dict]) -> None:
    body = {"messageId": "m1", "tools": tools}
    response = client.post("/api/v1/messages/tools", json=body, headers=key.headers)
    assert response.status_code == 201, response.get_data(as_text=True)


def test_every_write_to_a_call_row_gives_it_a_new_stamp(app, client, project_key):
    _post_tools(client, project_key, [tool_item(0, 0), tool_item(0, 1, response="one")])
    inserted = _stamps(app)
    assert None not in inserted.values()
    # The response arrives later: the ingestion's update of that row only.
    _post_tools(client, project_key, [tool_item(0, 0, response="zero")])
    answered = _stamps(app)
    assert answered["call_0_0"] != inserted["call_0_0"]
    assert answered["call_0_1"] == inserted["call_0_1"]
    # The token pass stores both rows' counts.
    with app.app_context():
        assert count_pending() == 2
    counted = _stamps(app)
    assert all(counted[c] != answered[c] for c in counted)
    with app.app_context():
        # By hand, without a word of the stamp: the triggers give a new one (an update that
        # sets the stamp itself, as the write paths do, keeps it).
        db.session.execute(
            sa.text("UPDATE tool_invocation SET is_error = :true WHERE external_tool_call_id = :c"),
            {"true": True, "c": "call_0_0"},
        )
        db.session.execute(
            sa.text("UPDATE tool_invocation SET stamp = 42 WHERE external_tool_call_id = :c"),
            {"c": "call_0_1"},
        )
        db.session.execute(
            sa.text(
                "INSERT INTO tool_invocation (project_id, message_id, round_index,"
                " sequence_index, external_tool_call_id, function_name, created_at, is_error)"
                " SELECT project_id, message_id, 1, 0, 'by_hand', 'lookup', created_at, :false"
                " FROM tool_invocation WHERE external_tool_call_id = 'call_0_0'"
            ),
            {"false": False},
        )
        db.session.commit()
    by_hand = _stamps(app)
    assert by_hand["call_0_0"] not in (None, counted["call_0_0"])
    assert by_hand["call_0_1"] == 42
    assert by_hand["by_hand"] is not None


def _tool_statements(statements: list[str]) -> list[str]:
    return [s for s in statements if "FROM tool_invocation" in s]


def test_a_load_reads_the_texts_of_new_and_changed_rows_only(
    app, client, project_key, count_queries
):
    with app.app_context():
        _store(client, project_key)
        project_id = project_key.project_id
        first = _calls(_load(project_id))
        db.session.remove()
    with count_queries() as unchanged, app.app_context():
        again = _calls(_load(project_id))
    # One statement for the calls, which reads their ids and stamps, not their texts.
    (statement,) = _tool_statements(unchanged.statements)
    assert "tool_invocation.response" not in statement
    assert all(again[c] is first[c] for c in first)

    with app.app_context():
        db.session.execute(
            sa.text(
                "UPDATE tool_invocation SET response = 'changed' WHERE external_tool_call_id = :c"
            ),
            {"c": "call_2"},
        )
        # A row stored before the stamp existed: read whole at every load.
        db.session.execute(
            sa.text("UPDATE tool_invocation SET stamp = NULL WHERE external_tool_call_id = :c"),
            {"c": "call_3"},
        )
        db.session.commit()
    for _ in range(2):
        with count_queries() as changed, app.app_context():
            loaded = _load(project_id)
            _same(loaded, _load(project_id, reuse=False))
        keys, by_id = _tool_statements(changed.statements)[:2]
        assert "tool_invocation.response" not in keys
        assert "tool_invocation.response" in by_id and "tool_invocation.id IN" in by_id
        calls = _calls(loaded)
        assert calls["call_1"] is first["call_1"]
        assert calls["call_2"].response == "changed"


def test_many_changed_rows_are_read_by_the_whole_select(
    app, client, project_key, count_queries, monkeypatch
):
    monkeypatch.setattr(histories, "MAX_READ_BY_ID", 1)
    with app.app_context():
        _store(client, project_key)
        project_id = project_key.project_id
        _load(project_id)
        db.session.execute(sa.text("UPDATE tool_invocation SET response = 'all changed'"))
        db.session.commit()
        db.session.remove()
    with count_queries() as counter, app.app_context():
        loaded = _load(project_id)
    keys, whole = _tool_statements(counter.statements)[:2]
    assert "tool_invocation.response" not in keys
    assert "tool_invocation.response" in whole and "tool_invocation.id IN" not in whole
    assert {c.response for c in _calls(loaded).values()} == {"all changed"}
    with app.app_context():
        _same(loaded, _load(project_id, reuse=False))
