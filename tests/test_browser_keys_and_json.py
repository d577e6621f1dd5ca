"""Issue 23 in Chromium, light and dark: nested JSON in the call panel and the replay's raw view
folds and unfolds, each value copies its JSON and its path.

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/keys-json-*.png`` for a person to look at.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    dev_app_config_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()

ARGUMENTS = {"query": "revenue", "filters": {"year": 2025, "odd key": ["a", "b"]}}
RESULT = {
    "results": [
        {"title": "Q3 report", "score": 0.91, "tags": ["finance", "q3"]},
        {"title": "Q4 plan", "score": 12345678901234567890, "tags": []},
    ],
    "paging": {"next": None, "total": 2},
}


@pytest.fixture
def nested(app, project_key) -> dict[str, int]:
    """A conversation whose one call has nested arguments and a nested result."""
    at = datetime.now(UTC) - timedelta(minutes=5)
    with app.app_context():
        conv = f.conversation(project_key.project_id, "nested-1", title="Nested JSON", at=at)
        f.message(conv, "nested-u", "user", "Find the revenue reports.", at=at)
        msg = f.message(
            conv, "nested-a", "assistant", "Found two.", at=at, status="completed", model="gpt-4o"
        )
        f.calls(msg, 0, [f.Call("search_docs", ARGUMENTS, json.dumps(RESULT))], at=at)
        db.session.commit()
        call = db.session.scalar(
            select(ToolInvocation.id).where(ToolInvocation.function_name == "search_docs")
        )
        return {"conversation": conv.id, "call": call}


def node_of_key(scope, key: str):
    """The value under ``key`` (its key span's next value node)."""
    return scope.locator(".j-key", has_text=json.dumps(key)).first.locator(
        "xpath=following-sibling::span[contains(@class, 'jn')][1]"
    )


def clipboard(page) -> str:
    return page.evaluate("() => navigator.clipboard.readText()")


def copy(page, node, kind: str) -> str:
    """Point at the value (its buttons show), click its copy button, read the clipboard."""
    node.locator("xpath=./span[not(contains(@class, 'jtools'))]").first.hover()
    button = node.locator(f":scope > .jtools > .jb-{kind}")
    expect(button).to_have_css("opacity", "1")
    button.click()
    expect(button).to_have_attribute("data-state", "copied")
    return clipboard(page)


def test_call_panel_json_folds_and_copies_values_and_paths(tab, nested, scheme):
    page, watch = tab
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/conversations/{nested['conversation']}")
    page.locator(f"#call-{nested['call']}").click()
    response = page.locator(f"#call-{nested['call']}-response pre.jtree")
    expect(response).to_be_visible()

    # Fold the results: their inside hides, the bracket says how many items it holds.
    results = node_of_key(response, "results")
    inside = results.locator(":scope > .jk")
    toggle = results.locator(":scope > .jb-fold")
    expect(inside).to_be_visible()
    toggle.click()
    expect(inside).to_be_hidden()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    hint = results.locator(":scope > .jo").evaluate("(e) => getComputedStyle(e, '::after').content")
    assert hint == '"2 items"'
    assert "Q3 report" not in response.inner_text()
    watch.shot(f"keys-json-call-folded-{scheme}", full_page=False)
    toggle.click()
    expect(inside).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")

    # A value's JSON, exactly as stored (a big integer keeps its digits), and its path.
    first_item = results.locator(":scope > .jk > .jn").first
    assert json.loads(copy(page, first_item, "value")) == RESULT["results"][0]
    assert clipboard(page) == json.dumps(RESULT["results"][0], indent=2)
    assert copy(page, first_item, "path") == "$.results[0]"
    second_item = results.locator(":scope > .jk > .jn").nth(1)
    score = node_of_key(second_item, "score")
    assert copy(page, score, "value") == "12345678901234567890"
    assert copy(page, score, "path") == "$.results[1].score"
    assert copy(page, node_of_key(response, "next"), "path") == "$.paging.next"
    assert copy(page, response.locator(":scope > .jn"), "path") == "$"
    assert json.loads(copy(page, response.locator(":scope > .jn"), "value")) == RESULT

    arguments = page.locator(f"#call-{nested['call']}-arguments pre.jtree")
    odd = node_of_key(arguments, "odd key")
    assert copy(page, odd, "path") == '$.filters["odd key"]'
    assert copy(page, odd.locator(":scope > .jk > .jn").nth(1), "path") == (
        '$.filters["odd key"][1]'
    )
    assert json.loads(copy(page, odd, "value")) == ["a", "b"]
    node_of_key(arguments, "year").locator(".j-num").hover()
    watch.shot(f"keys-json-call-{scheme}", full_page=False)


def test_replay_raw_json_folds_and_copies(tab, app, project_key, scheme):
    page, watch = tab
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    with app.app_context():
        conv_id = f.support_conversation(project_key.project_id).id
        db.session.commit()
    page.goto(f"/conversations/{conv_id}/replay?view=json")
    raw = page.locator("#replay-raw-json.jtree")
    expect(raw).to_be_visible()
    payload = json.loads(raw.inner_text())
    messages = node_of_key(raw, "messages")
    first = messages.locator(":scope > .jk > .jn").first
    assert json.loads(copy(page, first, "value")) == payload["messages"][0]
    assert copy(page, node_of_key(first, "role"), "path") == "$.messages[0].role"
    # Fold every message but the first two.
    for index in range(2, messages.locator(":scope > .jk > .jn").count()):
        item = messages.locator(":scope > .jk > .jn").nth(index)
        if item.locator(":scope > .jb-fold").count():
            item.locator(":scope > .jb-fold").click()
    expect(messages.locator(":scope > .jk > .jn.folded").first).to_be_visible()
    watch.shot(f"keys-json-replay-{scheme}", full_page=False)


FOCUSED = """() => {
  const e = document.querySelector('#timeline .focused');
  if (!e) return null;
  const label = e.querySelector('.turn-label[id]');
  return label ? label.id : e.id;
}"""


def focused(page) -> str | None:
    return page.evaluate(FOCUSED)


def test_keys_move_through_turns_rounds_and_calls_and_open_the_call(tab, app, project_key, scheme):
    page, watch = tab
    with app.app_context():
        conv_id = f.support_conversation(project_key.project_id).id
        db.session.commit()
    page.goto(f"/conversations/{conv_id}")
    expect(page.locator(".call-card").first).to_be_visible()
    rounds = page.eval_on_selector_all("#timeline .round[id]", "(es) => es.map(e => e.id)")
    cards = page.eval_on_selector_all("#timeline .call-card", "(es) => es.map(e => e.id)")
    assert len(rounds) >= 3 and len(cards) >= 5
    watch.shot(f"keys-json-keys-top-{scheme}", full_page=False)

    # Turns: j and k (k before the first stays there).
    page.keyboard.press("j")
    assert focused(page) == "turn-1"
    assert page.evaluate("() => location.hash") == "#turn-1"
    page.keyboard.press("j")
    assert focused(page) == "turn-2"
    page.keyboard.press("k")
    page.keyboard.press("k")
    assert focused(page) == "turn-1"
    # Rounds: n, p, and J, K.
    page.keyboard.press("n")
    assert focused(page) == rounds[0]
    page.keyboard.press("n")
    assert focused(page) == rounds[1]
    page.keyboard.press("Shift+K")
    assert focused(page) == rounds[0]
    page.keyboard.press("Shift+J")
    page.keyboard.press("p")
    assert focused(page) == rounds[0]
    # Calls: ] and [, and the arrows; the call has the keyboard focus.
    page.keyboard.press("]")
    assert focused(page) == cards[0]
    page.keyboard.press("]")
    page.keyboard.press("ArrowRight")
    assert focused(page) == cards[2]
    page.keyboard.press("[")
    assert focused(page) == cards[1]
    assert page.evaluate("() => document.activeElement.id") == cards[1]
    # j from a call goes to the next turn; the call after it is in that turn.
    page.keyboard.press("j")
    assert focused(page) == "turn-2"
    page.keyboard.press("ArrowRight")
    second_turn_call = focused(page)
    assert second_turn_call == cards[4]
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert focused(page) == cards[2]

    # Enter opens the call's panel, Esc closes it and the keys go on from the call.
    name = page.locator(f"#{cards[2]} .fn").inner_text()
    page.keyboard.press("Enter")
    expect(page.locator("#detail .detail h2")).to_have_text(name)
    watch.shot(f"keys-json-keys-call-{scheme}", full_page=False)
    page.keyboard.press("Escape")
    expect(page.locator("#detail .detail")).to_have_count(0)
    assert page.evaluate("() => document.activeElement.id") == cards[2]
    page.keyboard.press("]")
    page.keyboard.press("o")
    expect(page.locator("#detail .detail h2")).to_have_text(
        page.locator(f"#{cards[3]} .fn").inner_text()
    )

    # ? lists the keys; Esc closes the list and leaves the panel open.
    page.keyboard.press("?")
    dialog = page.locator("#keys-help")
    expect(dialog).to_be_visible()
    assert "Next, previous round" in dialog.inner_text()
    watch.shot(f"keys-json-keys-help-{scheme}", full_page=False)
    page.keyboard.press("j")  # not taken behind the list
    assert focused(page) == cards[3]
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.locator("#detail .detail")).to_have_count(1)
    # The button beside the timeline tools opens it too.
    page.locator("[data-keys-help]").click()
    expect(dialog).to_be_visible()
    dialog.locator("[data-keys-close]").click()
    expect(dialog).to_be_hidden()

    # Typing in a field takes no key.
    page.locator("#jump-turn").click()
    page.keyboard.press("j")
    page.keyboard.press("]")
    assert focused(page) == cards[3]
