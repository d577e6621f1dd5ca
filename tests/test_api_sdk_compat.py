"""The real `unique_sdk` package, unmodified, pointed at Toolscope (its MessageTool API).

The SDK sends `Authorization: Bearer <key>` plus x-user-id / x-company-id / x-app-id headers,
JSON bodies for POST and URL-encoded query strings for GET; it treats any 2xx as success,
retries 5xx and dropped connections (3 attempts, 1 s then 2 s back-off) and splits more than
200 message ids into several GETs.
"""

from __future__ import annotations

import asyncio
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import unique_sdk
from api_support import row_counts
from unique_sdk import _util as sdk_util

USER, COMPANY = "user-1", "company-1"


@pytest.fixture
def app_config():
    # A writer waiting for SQLite's lock gives up quickly (the 503 test holds the lock).
    return {"SQLITE_BUSY_TIMEOUT_MS": 100}


class RecordingMiddleware:
    """Records every request the server sees; can answer one request with a 5xx after the app
    has fully handled (and committed) it, as a proxy timing out would."""

    def __init__(self, app: Callable[..., Any]):
        self.app = app
        self.seen: list[dict[str, Any]] = []
        self.fail_next_post = False
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]):
        with self._lock:
            self.seen.append(
                {
                    "method": environ["REQUEST_METHOD"],
                    "path": environ["PATH_INFO"],
                    "query": environ.get("QUERY_STRING", ""),
                    "headers": {k: v for k, v in environ.items() if k.startswith("HTTP_")},
                }
            )
            fail = self.fail_next_post and environ["REQUEST_METHOD"] == "POST"
            if fail:
                self.fail_next_post = False
        if not fail:
            return self.app(environ, start_response)
        status: list[str] = []
        body = b"".join(self.app(environ, lambda s, h, exc_info=None: status.append(s)))
        assert status[0].startswith("201"), body  # the batch really was stored
        start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
        return [b"upstream connection reset"]

    def requests_to(self, method: str, path: str) -> list[dict[str, Any]]:
        return [r for r in self.seen if r["method"] == method and r["path"] == path]


@pytest.fixture
def sdk(app, live_server, project_key, monkeypatch) -> Iterator[RecordingMiddleware]:
    recorder = RecordingMiddleware(app.wsgi_app)
    monkeypatch.setattr(app, "wsgi_app", recorder)
    monkeypatch.setattr(unique_sdk, "api_key", project_key.key)
    monkeypatch.setattr(unique_sdk, "app_id", "app-1")
    monkeypatch.setattr(unique_sdk, "api_base", live_server + "/api/v1")
    # The SDK's retry back-off sleeps 1 s, then 2 s; record the waits instead of waiting.
    waits: list[float] = []
    monkeypatch.setattr(sdk_util, "time", types.SimpleNamespace(sleep=waits.append))
    recorder.waits = waits  # type: ignore[attr-defined]
    yield recorder


def tools(n: int, with_response: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "externalToolCallId": f"call_{i}",
            "functionName": "get_weather",
            "arguments": {"location": "Zurich", "i": i},
            "roundIndex": i // 3,
            "sequenceIndex": i % 3,
            **({"response": {"content": f'{{"temp": {i}}}'}} if with_response else {}),
        }
        for i in range(n)
    ]


def test_create_many_and_get_message_tools(sdk):
    created = unique_sdk.MessageTool.create_many(
        user_id=USER, company_id=COMPANY, messageId="msg_1", tools=tools(4)
    )
    assert len(created["data"]) == 4
    first = created["data"][0]
    assert first["functionName"] == "get_weather" and first["messageId"] == "msg_1"
    assert first["response"]["content"] == '{"temp": 0}'
    assert first.functionName == "get_weather"  # SDK objects allow attribute access

    fetched = unique_sdk.MessageTool.get_message_tools(
        user_id=USER, company_id=COMPANY, messageIds="msg_1"
    )
    assert [t["id"] for t in fetched["data"]] == [t["id"] for t in created["data"]]

    (post,) = sdk.requests_to("POST", "/api/v1/messages/tools")
    headers = post["headers"]
    assert headers["HTTP_AUTHORIZATION"].startswith("Bearer ts_")
    assert (headers["HTTP_X_USER_ID"], headers["HTTP_X_COMPANY_ID"]) == (USER, COMPANY)
    assert headers["HTTP_X_APP_ID"] == "app-1"


def test_201_message_ids_are_fetched_in_two_requests(sdk):
    ids = [f"msg_{i}" for i in range(201)]
    for message_id in (ids[0], ids[150], ids[200]):
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId=message_id, tools=tools(2)
        )
    fetched = unique_sdk.MessageTool.get_message_tools(
        user_id=USER, company_id=COMPANY, messageIds=",".join(ids)
    )
    gets = sdk.requests_to("GET", "/api/v1/messages/tools")
    assert len(gets) == 2
    assert "%2C" in gets[0]["query"]  # the SDK URL-encodes the commas
    assert sorted({t["messageId"] for t in fetched["data"]}) == sorted([ids[0], ids[150], ids[200]])
    assert len(fetched["data"]) == 6


def test_a_retry_after_a_5xx_stores_the_batch_once(app, sdk):
    sdk.fail_next_post = True
    created = unique_sdk.MessageTool.create_many(
        user_id=USER, company_id=COMPANY, messageId="msg_retry", tools=tools(6)
    )
    assert len(sdk.requests_to("POST", "/api/v1/messages/tools")) == 2
    assert sdk.waits == [pytest.approx(1, abs=0.2)]  # one back-off, then success
    assert len(created["data"]) == 6
    assert row_counts(app)["tool_invocation"] == 6


def test_responses_added_later_and_conflicts_surface_as_sdk_errors(app, sdk):
    unique_sdk.MessageTool.create_many(
        user_id=USER, company_id=COMPANY, messageId="m", tools=tools(3, with_response=False)
    )
    completed = unique_sdk.MessageTool.create_many(
        user_id=USER, company_id=COMPANY, messageId="m", tools=tools(3)
    )
    assert all(t["response"] for t in completed["data"])

    changed = tools(1)
    changed[0]["functionName"] = "something_else"
    with pytest.raises(unique_sdk.InvalidRequestError) as excinfo:
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId="m", tools=changed
        )
    error = excinfo.value
    assert (error.http_status, error.code) == (400, "conflict")  # a 4xx: not retried
    assert "a different call is already stored" in str(error)
    assert "(function_name differ)" in str(error)
    assert len(sdk.requests_to("POST", "/api/v1/messages/tools")) == 3
    assert row_counts(app)["tool_invocation"] == 3


def test_an_invalid_key_is_an_authentication_error(sdk, monkeypatch):
    monkeypatch.setattr(unique_sdk, "api_key", "ts_wrong")
    with pytest.raises(unique_sdk.AuthenticationError) as excinfo:
        unique_sdk.MessageTool.get_message_tools(user_id=USER, company_id=COMPANY, messageIds="m")
    assert excinfo.value.http_status == 401
    assert str(excinfo.value) == "invalid or revoked API key"


def test_51_tools_are_an_invalid_request_error_that_says_why(app, sdk):
    with pytest.raises(unique_sdk.InvalidRequestError) as excinfo:
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId="m", tools=tools(51)
        )
    error = excinfo.value
    assert str(error) == "tools: 51 tools in one request; the limit is 50"
    assert (error.http_status, error.code) == (400, "too_large")
    assert error.json_body["error"]["details"][0]["limit"] == 50
    assert len(sdk.requests_to("POST", "/api/v1/messages/tools")) == 1
    assert row_counts(app)["tool_invocation"] == 0


@pytest.mark.parametrize(
    ("tool", "reason"),
    [
        ({"roundIndex": -1}, "tools.0.roundIndex: Input should be greater than or equal to 0"),
        ({"sequenceIndex": "3"}, "tools.0.sequenceIndex: Input should be a valid integer"),
        ({"functionName": ""}, "tools.0.functionName: String should have at least 1 character"),
    ],
)
def test_an_invalid_tool_is_an_invalid_request_error_naming_the_field(sdk, tool, reason):
    with pytest.raises(unique_sdk.InvalidRequestError) as excinfo:
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId="m", tools=[{**tools(1)[0], **tool}]
        )
    assert str(excinfo.value) == reason


def test_too_many_ids_are_an_invalid_request_error(app, sdk, monkeypatch):
    # The SDK splits its id lists at 200, as we do; a smaller server limit shows the refusal.
    monkeypatch.setitem(app.config, "MAX_IDS_PER_REQUEST", 2)
    with pytest.raises(unique_sdk.InvalidRequestError) as excinfo:
        unique_sdk.MessageTool.get_message_tools(
            user_id=USER, company_id=COMPANY, messageIds="a,b,c"
        )
    assert str(excinfo.value) == "query.messageIds: 3 message ids in one request; the limit is 2"


def test_a_busy_database_is_retried_then_reported_with_our_message(app, sdk, sqlite_writer):
    """A 503 is what the SDK retries (three attempts, 1 s then 2 s apart); it then reports
    the last answer's message."""
    with pytest.raises(unique_sdk.APIError) as excinfo:
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId="m", tools=tools(2)
        )
    assert str(excinfo.value) == (
        "Failed after 3 attempts: the database is busy with concurrent writes; retry the request"
    )
    last = excinfo.value.__cause__
    assert isinstance(last, unique_sdk.APIError)
    assert (last.http_status, last.code) == (503, "busy")
    assert last.headers["Retry-After"] == "1"
    assert len(sdk.requests_to("POST", "/api/v1/messages/tools")) == 3
    assert sdk.waits == [pytest.approx(1, abs=0.2), pytest.approx(2, abs=0.3)]


# The SDK hands httpx a str as `data=`, which httpx deprecates; harmless, but our warnings are
# errors, and the SDK would turn that error into a connection failure.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:httpx")
def test_the_async_variants(sdk):
    async def run() -> tuple[Any, Any]:
        created = await unique_sdk.MessageTool.create_many_async(
            user_id=USER, company_id=COMPANY, messageId="async_1", tools=tools(2)
        )
        ids = ",".join(["async_1"] + [f"none_{i}" for i in range(250)])
        fetched = await unique_sdk.MessageTool.get_message_tools_async(
            user_id=USER, company_id=COMPANY, messageIds=ids
        )
        return created, fetched

    created, fetched = asyncio.run(run())
    assert [t["id"] for t in fetched["data"]] == [t["id"] for t in created["data"]]
    assert len(sdk.requests_to("GET", "/api/v1/messages/tools")) == 2
