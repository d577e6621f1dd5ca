"""A small HTML tree for asserting on pages with a parser rather than substring soup.

Built on the standard library's ``html.parser`` (no extra dependency). ``select`` understands
the selectors our tests need: ``tag``, ``#id``, ``.class``, ``[attr]``, ``[attr=value]``,
compounds of those (``a.call-card[hx-get]``) and the descendant combinator (``#timeline
article``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
    "track", "wbr",
}  # fmt: skip


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)
    parent: Node | None = field(default=None, repr=False)

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.attrs.get(name)
        return default if value is None else value

    @property
    def text(self) -> str:
        parts: list[str] = []
        for child in self.children:
            parts.append(child if isinstance(child, str) else child.text)
        return "".join(parts)

    def iter(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.iter()

    def select(self, selector: str) -> list[Node]:
        steps = [_compile(part) for part in selector.split()]
        found = [n for n in self.iter() if steps[-1](n)]
        return [n for n in found if _ancestors_match(n, steps[:-1])]

    def one(self, selector: str) -> Node:
        found = self.select(selector)
        assert len(found) == 1, f"{selector!r}: expected one element, found {len(found)}"
        return found[0]


def _ancestors_match(node: Node, steps: list) -> bool:
    if not steps:
        return True
    parent = node.parent
    while parent is not None:
        if steps[-1](parent) and _ancestors_match(parent, steps[:-1]):
            return True
        parent = parent.parent
    return False


_SIMPLE = re.compile(r"([#.]?[\w-]+)|\[([\w-]+)(?:=\"?([^\]\"]*)\"?)?\]")


def _compile(compound: str):
    tests = []
    for match in _SIMPLE.finditer(compound):
        token, attr, value = match.groups()
        if attr is not None:
            tests.append(lambda n, a=attr, v=value: a in n.attrs and (v is None or n.attrs[a] == v))
        elif token.startswith("#"):
            tests.append(lambda n, i=token[1:]: n.attrs.get("id") == i)
        elif token.startswith("."):
            tests.append(lambda n, c=token[1:]: c in n.classes)
        else:
            tag = token.lower()
            tests.append(lambda n, t=tag: n.tag == t)
    return lambda node: all(test(node) for test in tests)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.current = self.root

    def handle_starttag(self, tag: str, attrs) -> None:
        node = Node(tag, dict(attrs), parent=self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.current.children.append(Node(tag, dict(attrs), parent=self.current))

    def handle_endtag(self, tag: str) -> None:
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(html: str | bytes) -> Node:
    builder = _Builder()
    builder.feed(html.decode() if isinstance(html, bytes) else html)
    builder.close()
    return builder.root
