"""Answers composed from reads, and calls to outside services.

Between the reads and writes (``queries``, ``ingest``) and the faces (``api``, ``views``): an
answer that takes several reads and the pure core to make, or that a worker keeps between
requests, is put together here, and the faces turn it into a response. Calls to outside
services (model providers) will live here too.

* ``replay_answer``: a replay's answer, from the conversation's record to the bytes the faces
  send (load, build, encode), through the worker's answer cache; the fast path's hooks.
* ``replay_cache``: the answer cache: encoded answers cut where they say "now", and when each
  holds.
* ``row_memo``: what the loader made of each stored tool call, kept per worker.
* ``sized_lru``: the byte-bounded LRU under both, bounded by ``REPLAY_CACHE_MB``.
* ``call_list``: an item of the calls explorer's list, as the API and the dashboard's twin
  answer it.
* ``model_runs``: runs, a conversation's replay sent to a model connection: made, queued,
  claimed, executed, reaped when their worker stopped; the run document.
* ``run_worker``: the threads that work through the queue of runs (in the token pass process,
  ``toolscope serve`` or ``toolscope runs work``).
* ``providers``: the one place a model provider is called, through its official SDK.
"""
