"""Server-side display of untrusted content: JSON pretty-printing with highlighting, folding.

Everything agents send is hostile until escaped. The highlighter therefore escapes every token
first and only then wraps it in a ``<span class="j-...">``; the returned Markup is built from
escaped pieces and our own constant tags, nothing else. Templates never use ``|safe`` on agent
content: they receive Markup from here, or plain strings that Jinja escapes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from ..replay.jsonfast import parse_container

# Long content is folded at this many characters; the rest loads on "show all".
FOLD_CHARS = 4000

_TOKEN_RE = re.compile(
    r"""
    (?P<key>"(?:[^"\\]|\\.)*"(?=\s*:))       # an object key: a string followed by a colon
    |(?P<string>"(?:[^"\\]|\\.)*"?)          # a string (unterminated where folding cut it)
    |(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<literal>\b(?:true|false|null)\b)
    |(?P<punct>[{}\[\],:])
    |(?P<space>\s+)
    |(?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_CLASSES = {
    "key": "j-key",
    "string": "j-str",
    "number": "j-num",
    "literal": "j-lit",
    "punct": "j-punct",
}


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def highlight_json_text(text: str) -> Markup:
    """Highlight JSON text (possibly cut short). Every token is escaped before it is wrapped."""
    pieces: list[str] = []
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup or "other"
        token = str(escape(match.group()))
        css = _CLASSES.get(kind)
        pieces.append(f'<span class="{css}">{token}</span>' if css else token)
    return Markup("".join(pieces))


def fold(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to about ``limit`` characters at a line end when one is near."""
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = limit
    return text[:cut], True


@dataclass(frozen=True, slots=True)
class RenderedContent:
    """How a piece of content is shown: ``html`` is safe Markup, ``folded`` says that only the
    first ``shown_chars`` of ``total_chars`` are in it."""

    kind: str  # "json", "text" or "none"
    html: Markup
    folded: bool
    total_chars: int
    shown_chars: int


NO_CONTENT = RenderedContent("none", Markup(""), False, 0, 0)


def render_value(value: Any, *, limit: int | None = FOLD_CHARS) -> RenderedContent:
    """A JSON value (e.g. tool arguments) pretty-printed and highlighted."""
    if value is None:
        return NO_CONTENT
    text = pretty_json(value)
    shown, folded = fold(text, limit) if limit else (text, False)
    return RenderedContent("json", highlight_json_text(shown), folded, len(text), len(shown))


def render_text(text: str | None, *, limit: int | None = FOLD_CHARS) -> RenderedContent:
    """A tool result or message: JSON objects/arrays highlighted, anything else as plain text."""
    if text is None:
        return NO_CONTENT
    parsed = parse_container(text)
    if parsed is not None:
        return render_value(parsed, limit=limit)
    shown, folded = fold(text, limit) if limit else (text, False)
    return RenderedContent("text", Markup(escape(shown)), folded, len(text), len(shown))


def short_arguments(arguments: dict[str, Any] | None, limit: int = 140) -> str:
    """A one-line summary such as ``query="revenue", top_k=5`` (plain text, escaped later)."""
    if arguments is None:
        return ""
    if not isinstance(arguments, dict):
        summary = json.dumps(arguments, ensure_ascii=False)
    else:
        summary = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()
        )
    summary = " ".join(summary.split())
    return summary if len(summary) <= limit else summary[: limit - 1] + "…"
