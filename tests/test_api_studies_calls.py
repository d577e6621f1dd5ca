"""A study's conversations picked by the calls explorer's filters over the API (issue 25,
item 5): ``"conversations": {"calls": {...}}`` studies the conversations holding a matching
call, the study records the filters, bad filters answer 422 naming the field, another
project's calls are never picked. SQLite and PostgreSQL (the `app` fixture)."""

from __future__ import annotations

from datetime import timedelta

import factories
import pytest
from runs_support import RUN_CONFIG, T0, TURN_2
from studies_support import CIDS, FRESH, STALE, seed

from webapp.api.studies import StudyOut

OTHER = "docs-1"


def docs_conversation(app, project_id: int, cid: str = OTHER) -> None:
    """Two turns like the orders conversations, but the agent calls search_docs, which fails
    in turn 1."""
    with app.app_context():
        conv = factories.conversation(project_id, cid, title="Docs", at=T0, channel_name="web")
        factories.message(conv, f"{cid}-u1", "user", "How do I reset?", at=T0)
        first = factories.message(
            conv, f"{cid}-a1", "assistant", "Sorry.", at=T0 + timedelta(seconds=1),
            status="completed", model="gpt-4o",
        )  # fmt: skip
        failed = factories.Call(
            "search_docs", {"q": "reset"}, "ERROR: index down", is_error=True,
            external_id=f"{cid}-call-1",
        )  # fmt: skip
        factories.calls(first, 0, [failed], at=T0 + timedelta(seconds=1))
        factories.message(conv, f"{cid}-u2", "user", "And now?", at=TURN_2)
        second = factories.message(
            conv, f"{cid}-a2", "assistant", "Use Settings.", at=TURN_2 + timedelta(seconds=1),
            status="completed", model="gpt-4o",
        )  # fmt: skip
        ok = factories.Call(
            "search_docs", {"q": "reset"}, "Settings > Reset", external_id=f"{cid}-call-2"
        )
        factories.calls(second, 0, [ok], at=TURN_2 + timedelta(seconds=1))
        factories.commit()


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def seeded(app, project_key, other_project_key, fake):
    seed(app, project_key.project_id, fake)
    docs_conversation(app, project_key.project_id)
    docs_conversation(app, other_project_key.project_id, "theirs-docs")
    return project_key


def post(client, key, calls, **body):
    body = {
        "connection": "oa",
        "conversations": {"calls": calls},
        "variants": {"a": STALE, "b": FRESH},
        **body,
    }
    return client.post("/api/v1/studies", json=body, headers=key.headers)


def test_the_conversations_holding_matching_calls(client, seeded):
    response = post(client, seeded, {"tool": "search_docs", "status": "error"})
    assert response.status_code == 202, response.get_json()
    document = response.get_json()
    StudyOut.model_validate(document)
    assert document["conversations"] == 1  # docs-1; theirs-docs is another project's
    assert document["calls"] == {"tool": "search_docs", "status": "error"}
    assert document["filters"] is None

    searched = post(client, seeded, {"q": "reset"}).get_json()  # in search_docs' arguments
    assert searched["conversations"] == 1 and searched["calls"] == {"q": "reset"}
    everything = post(client, seeded, {"from": "2026-03-01", "to": "2026-03-01"}).get_json()
    assert everything["conversations"] == len(CIDS) + 1  # a day as `to` includes it
    assert everything["calls"] == {
        "from": "2026-03-01T00:00:00+00:00",
        "to": "2026-03-02T00:00:00+00:00",
    }


@pytest.mark.parametrize(
    ("calls", "field"),
    [
        ({"status": "bogus"}, "conversations"),
        ({"sort": "time"}, "conversations"),
        ({"from": "yesterday"}, "conversations"),
        ({"min_ms": -1}, "conversations"),
    ],
)
def test_bad_filters_answer_422(client, seeded, calls, field):
    response = post(client, seeded, calls)
    assert response.status_code == 422, response.get_json()
    fields = [d.get("field", "") for d in response.get_json()["error"].get("details", [])]
    assert any(f.startswith(field) for f in fields), fields


def test_no_matching_call_is_404(client, seeded):
    response = post(client, seeded, {"tool": "never_called"})
    assert response.status_code == 404
    assert "match no conversation" in response.get_json()["error"]["message"]


def test_bounds_beyond_every_time_bound_nothing(client, seeded):
    """`to` 9999-12-31 reaches past the last representable day, and a `from` in year 1 with an
    offset falls before the first: valid as the schema says, they bound nothing (not a 500)."""
    for calls in ({"to": "9999-12-31"}, {"from": "0001-01-01T00:00:00+23:59"}):
        response = post(client, seeded, calls)
        assert response.status_code == 202, response.get_json()
        assert response.get_json()["conversations"] == len(CIDS) + 1
