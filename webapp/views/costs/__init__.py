"""The Costs page and the chart panels of the conversation and tools pages."""

from __future__ import annotations

from .pages import register

__all__ = ["register"]
