"""Which agent span keys a turn
(docs/otlp-mapping.md, 'The outermost agent span keys the turn').

Frameworks nest agent spans: the OpenAI Agents SDK's workflow holds its agent's span, OpenLLMetry
puts LangGraph's `invoke_agent` over the graph's workflow span, OpenInference marks LangGraph's
`agent` node AGENT, once per model call of a run. A turn is one run, so a model call's turn is
keyed by its **outermost** agent ancestor, and an agent span that is a step of a graph (its
`metadata` names a `langgraph_node`) is not a run at all: a model call with only such ancestors
joins its turn by the other rules (continuation by tool-call ids). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Record = dict[str, Any]


def is_graph_step(attributes: Mapping[str, Any]) -> bool:
    """Whether an agent span is a node of a graph run (LangGraph's `langgraph_node` in the
    span's `metadata`, a JSON object or a structured value)."""
    metadata = attributes.get("metadata")
    if isinstance(metadata, str) and "langgraph_node" in metadata:
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return False
    return isinstance(metadata, Mapping) and bool(metadata.get("langgraph_node"))


def turn_agent(ancestors: Sequence[Record]) -> Record | None:
    """The agent span that keys the turn of a span with these ancestors (nearest first): the
    outermost one classified agent that is not a graph step."""
    found = None
    for record in ancestors:
        if record["class"] == "agent" and not record.get("graph_step"):
            found = record
    return found
