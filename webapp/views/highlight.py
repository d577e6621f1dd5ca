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

# A JSON value shown as a foldable tree (see :func:`fold_tree`) at most this long pretty-printed,
# with at most this many values; nesting deeper than FOLD_TREE_DEPTH is shown as highlighted text
# inside its parent. Beyond either bound the value is the plain highlighted text.
FOLD_TREE_CHARS = 200_000
FOLD_TREE_NODES = 5000
FOLD_TREE_DEPTH = 20

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


def _count_values(value: Any, limit: int) -> int:
    """How many values ``value`` holds (itself included) down to FOLD_TREE_DEPTH, counting
    stopped past ``limit``; no recursion, so any nesting is safe."""
    count = 0
    stack = [(value, 0)]
    while stack and count <= limit:
        item, depth = stack.pop()
        count += 1
        if isinstance(item, (dict, list)) and depth < FOLD_TREE_DEPTH:
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return count


def _tree_node(value: Any, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(value, (dict, list)) and value and depth < FOLD_TREE_DEPTH:
        is_dict = isinstance(value, dict)
        count = len(value)
        noun = ("key" if is_dict else "item") + ("" if count == 1 else "s")
        out.append(
            f'<span class="jn"><span class="j-punct jo" data-n="{count} {noun}">'
            f'{"{" if is_dict else "["}</span><span class="jk">'
        )
        items = value.items() if is_dict else ((None, v) for v in value)
        for index, (key, child) in enumerate(items):
            out.append('<span class="j-punct">,</span>\n' if index else "\n")
            out.append(pad + "  ")
            if is_dict:
                name = key if isinstance(key, str) else json.dumps(key)
                key_text = escape(json.dumps(name, ensure_ascii=False))
                out.append(f'<span class="j-key">{key_text}</span><span class="j-punct">:</span> ')
            _tree_node(child, depth + 1, out)
        out.append(f'\n{pad}</span><span class="j-punct">{"}" if is_dict else "]"}</span></span>')
        return
    text = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + pad)
    out.append(f'<span class="jn">{highlight_json_text(text)}</span>')


def fold_tree(value: Any) -> Markup | None:
    """``value`` pretty-printed and highlighted as :func:`pretty_json` and
    :func:`highlight_json_text` show it (the same text), each value wrapped in a
    ``<span class="jn">`` and each non-empty object or array's inside in a
    ``<span class="jk">``, for the page's script to fold and to copy a value or its path.
    None when the value is beyond the tree's bounds: the caller shows the plain text."""
    if _count_values(value, FOLD_TREE_NODES) > FOLD_TREE_NODES:
        return None
    out: list[str] = []
    _tree_node(value, 0, out)
    return Markup("".join(out))


@dataclass(frozen=True, slots=True)
class RenderedContent:
    """How a piece of content is shown: ``html`` is safe Markup, ``folded`` says that only the
    first ``shown_chars`` of ``total_chars`` are in it; ``foldable``: ``html`` is a
    :func:`fold_tree`."""

    kind: str  # "json", "text" or "none"
    html: Markup
    folded: bool
    total_chars: int
    shown_chars: int
    foldable: bool = False


NO_CONTENT = RenderedContent("none", Markup(""), False, 0, 0)


def render_value(
    value: Any, *, limit: int | None = FOLD_CHARS, tree: bool = False
) -> RenderedContent:
    """A JSON value (e.g. tool arguments) pretty-printed and highlighted; with ``tree``, as a
    :func:`fold_tree` when it is shown whole and within the tree's bounds."""
    if value is None:
        return NO_CONTENT
    text = pretty_json(value)
    shown, folded = fold(text, limit) if limit else (text, False)
    if tree and not folded and len(text) <= FOLD_TREE_CHARS:
        html = fold_tree(value)
        if html is not None:
            return RenderedContent("json", html, False, len(text), len(text), foldable=True)
    return RenderedContent("json", highlight_json_text(shown), folded, len(text), len(shown))


def render_text(
    text: str | None, *, limit: int | None = FOLD_CHARS, tree: bool = False
) -> RenderedContent:
    """A tool result or message: JSON objects/arrays highlighted, anything else as plain text."""
    if text is None:
        return NO_CONTENT
    parsed = parse_container(text)
    if parsed is not None:
        return render_value(parsed, limit=limit, tree=tree)
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
