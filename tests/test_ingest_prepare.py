"""The write path's two steps: preparing a batch (no write lock) and storing it (SQL only)."""

from __future__ import annotations

import pytest
from api_support import assert_error, raw_rows, row_counts, tool_item

from webapp.db import begin_write, db, utcnow
from webapp.ingest import WriteContext, prepare_message_tools, store_message_tools
from webapp.ingest.calls import CallDraft, prepare_calls
from webapp.ingest.errors import Invalid
from webapp.ingest.token_pass import count_pending
from webapp.redaction import NO_RULES, Rule, compile_rules

BASE = "/api/v1/conversations"
TOOLS_URL = "/api/v1/messages/tools"
MAX_RESULT = 1_000


@pytest.fixture
def app_config():
    return {"MAX_RESULT_BYTES": MAX_RESULT}


def test_the_turn_assistant_may_name_its_role(client, project_key):
    body = {"assistant": {"id": "a1", "role": "assistant", "content": "done"}}
    response = client.post(f"{BASE}/c1/turns", json=body, headers=project_key.headers)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["assistant"]["role"] == "assistant"


@pytest.mark.parametrize("role", ["user", "system", "tool", ""])
def test_any_other_role_of_the_turn_assistant_is_refused(app, client, project_key, role):
    body = {"assistant": {"id": "a1", "role": role, "content": "done"}}
    response = client.post(f"{BASE}/c1/turns", json=body, headers=project_key.headers)
    assert_error(response, 422, "invalid", field="assistant.role")
    assert set(row_counts(app).values()) == {0}


def test_an_invalid_batch_is_refused_without_waiting_for_the_write_lock(
    app, client, project_key, sqlite_writer
):
    """Redaction and measuring happen before the lock: a result over the limit is refused at
    once, not a 503 after the busy timeout."""
    tools = [tool_item(0, 0), tool_item(0, 1, response="x" * (MAX_RESULT + 1))]
    response = client.post(
        TOOLS_URL, json={"messageId": "m1", "tools": tools}, headers=project_key.headers
    )
    assert_error(response, 400, "invalid", field="tools.1.response.content")


def test_the_result_limit_applies_before_redaction_reads_the_result():
    """Redaction's time grows with the text it reads, so it reads no more than the limit: a
    result over it is refused even when redaction would have made it smaller. A skipped call
    is not stored, so its size does not matter."""
    shrinking = compile_rules((Rule("no-blob", "redact_paths", ("blob",)),))
    oversize = '{"blob": "%s", "to": "jane@example.com"}' % ("%" * MAX_RESULT)
    draft = CallDraft("tools.0", 0, 0, "c0", "search", {"q": "x"}, response=oversize)
    with pytest.raises(Invalid) as refused:
        prepare_calls([draft], shrinking, now=utcnow(), max_result_bytes=MAX_RESULT)
    assert refused.value.details[0]["field"] == "tools.0.response.content"
    skips = compile_rules((Rule("quiet", "skip", ()),))
    assert prepare_calls([draft], skips, now=utcnow(), max_result_bytes=1) == []


def test_a_batch_is_counted_for_the_model_its_message_has_when_the_pass_counts_it(
    app, client, project_key
):
    """Prepared before its message got a model, stored after: the calls are stored uncounted,
    and the token pass counts them with the tokenizer of the message's model by then."""
    with app.app_context():
        ctx = WriteContext(project_key.project_id, utcnow(), NO_RULES, MAX_RESULT)
        draft = CallDraft("tools.0", 0, 0, "c0", "search", {"q": "x"}, response="result")
        batch = prepare_message_tools(ctx, "m1", [draft])
        db.session.commit()
    assert batch.calls[0].row["token_method"] is None

    # Meanwhile another request stores the message with an OpenAI model (cl100k_base).
    message = {"id": "m1", "role": "assistant", "model": "gpt-4", "content": "hi"}
    response = client.post(
        f"{BASE}/c1/messages", json={"messages": [message]}, headers=project_key.headers
    )
    assert response.status_code == 201, response.get_data(as_text=True)

    with app.app_context():
        begin_write()
        store_message_tools(ctx, batch)
        db.session.commit()
    assert raw_rows(app, "SELECT token_method FROM tool_invocation") == [(None,)]
    with app.app_context():
        assert count_pending() == 1
    assert raw_rows(app, "SELECT token_method FROM tool_invocation") == [("tiktoken:cl100k_base",)]
