"""Pause Python's cyclic garbage collector around a whole replay job.

Loading and replaying a long conversation allocate hundreds of thousands of small objects that
form no reference cycles; meanwhile the collector would walk the whole (growing) heap again and
again, which made a 50k-call replay several times slower than linear. Reference counting still
frees everything.

The switch is process-wide, so the pure core never flips it: whoever runs a whole job pauses
once, around all of it — a replay request (``webapp.api.replay``, ``webapp.views.replay.pages``,
as a decorator), the charts that replay conversations (``webapp.views.charts``) and the
benchmark. It is re-enabled afterwards only if it was on before, so a concurrent pause leaves it
as the outermost one found it (at worst a concurrent thread runs briefly without cyclic
collection, never with it disabled for good).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
