"""Every write has one shape: a prepare step returns a `Write` whose store step is a named
function, and `ingest.transaction.run_write` runs it; the OTLP route is transport only, around
`ingest.otlp.receiver.receive`.

The views are read from the source with ``ast``, so a write view added later is checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from api_support import tool_item

import webapp
import webapp.api.endpoint as endpoint
from webapp.ingest.transaction import Write

API = Path(webapp.__file__).resolve().parent / "api"


def _prepare_views() -> list[tuple[str, ast.FunctionDef, ast.Module]]:
    """(module, function, tree) of every view decorated `@endpoint(..., prepares=True)`."""
    found = []
    for path in sorted(API.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and getattr(decorator.func, "id", None) == "endpoint"
                    and any(
                        k.arg == "prepares" and getattr(k.value, "value", None) is True
                        for k in decorator.keywords
                    )
                ):
                    found.append((path.stem, node, tree))
    return found


PREPARE_VIEWS = _prepare_views()


def test_the_six_prepare_views_are_found():
    assert len(PREPARE_VIEWS) >= 6, [f"{m}.{f.name}" for m, f, _ in PREPARE_VIEWS]


@pytest.mark.parametrize(
    ("module", "view", "tree"), PREPARE_VIEWS, ids=[f"{m}.{f.name}" for m, f, _ in PREPARE_VIEWS]
)
def test_a_prepare_view_returns_a_write_of_a_named_module_function(module, view, tree):
    nested = [n for n in ast.walk(view) if n is not view and isinstance(n, ast.FunctionDef)]
    nested += [n for n in ast.walk(view) if isinstance(n, ast.Lambda)]
    assert not nested, f"{module}.{view.name} defines a closure"
    module_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    returns = [n for n in ast.walk(view) if isinstance(n, ast.Return)]
    assert returns
    for node in returns:
        call = node.value
        assert isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Write", (
            f"{module}.{view.name} returns something else than Write(...)"
        )
        store = call.args[0]
        assert isinstance(store, ast.Name) and store.id in module_functions, (
            f"{module}.{view.name}'s store step is not a function of {module}"
        )


def _requests():
    base = "/api/v1/conversations"
    return [
        ("PUT", f"{base}/c1", {"title": "t"}),
        ("POST", f"{base}/c1/messages", {"messages": [{"id": "u1", "role": "user"}]}),
        (
            "POST",
            f"{base}/c1/turns",
            {"user": {"id": "u2", "content": "hi"}, "assistant": {"id": "a2", "rounds": []}},
        ),
        ("POST", f"{base}/c1/messages/a3/rounds/0", {"calls": [{"id": "x", "name": "f"}]}),
        (
            "POST",
            f"{base}/c2/import",
            {"format": "openai-chat", "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("POST", "/api/v1/messages/tools", {"messageId": "m1", "tools": [tool_item()]}),
    ]


def test_every_write_runs_a_named_store_step_through_the_runner(client, project_key, monkeypatch):
    ran: list[str] = []
    real = endpoint.run_write

    def recording(write, **kwargs):
        assert isinstance(write, Write)
        ran.append(write.store.__qualname__)
        return real(write, **kwargs)

    monkeypatch.setattr(endpoint, "run_write", recording)
    for method, url, body in _requests():
        response = client.open(url, method=method, json=body, headers=project_key.headers)
        assert response.status_code in (200, 201), (url, response.get_data(as_text=True))
    assert ran == [
        "_store_conversation",
        "_store_messages",
        "_store_turn",
        "_store_round",
        "_store_import",
        "_store_tools",
    ]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_otlp_route_is_transport_around_one_entry_point():
    """The route knows the receiver's entry point, its context, receipt and error, and
    nothing else of ingest (not the decoders, the store, nor the write runner)."""
    ingest = {name for name in _imports(API / "otlp.py") if "ingest" in name}
    assert ingest == {
        "..ingest.otlp.receiver.OtlpError",
        "..ingest.otlp.receiver.Receipt",
        "..ingest.otlp.receiver.ReceiveContext",
        "..ingest.otlp.receiver.receive",
    }
    assert not {name for name in _imports(API / "otlp.py") if name.startswith(".endpoint")}
