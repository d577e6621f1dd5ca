"""The demo's runs (docs/runs.md, 'Pages and forks'): a model connection to the scripted demo
model (``replay.scripted_model``, served by the app itself in DEV mode only, reached in process:
``services.providers.SCRIPTED_BASE_URL``), one run and one fork of the order conversation, so a
newcomer sees both on its page at once, without a key.

The runs are queued here and sent by the server's run worker (`make run` starts
``toolscope serve`` with TOOLSCOPE_DEV=1 right after ``toolscope demo``): the demo command
runs before the server and outside DEV mode, and needs no address of the server, since the
provider call never leaves the process that executes it. Loading twice adds nothing: the
connection is made once, the runs only while the conversation has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import func, select

from ..db import db
from ..ingest.transaction import Write, run_write
from ..models import ModelConnection, ModelRun, Project
from ..queries.conversations import find_conversation
from ..replay import scripted_model
from ..services import model_runs, replay_answer
from ..services.model_connections import ConnectionDraft, prepare_connection, store_connection
from ..services.providers import SCRIPTED_BASE_URL
from .catalog import PREFIX

CONNECTION = "scripted-demo"
CONVERSATION = PREFIX + "order-status"
TOOL = "lookup_order"
FAILURE = "ERROR: the order service timed out after 30 s"


@dataclass
class DemoRuns:
    connection_added: bool = False
    runs: list[str] | None = None


def add_demo_runs(app: Flask, project_slug: str) -> DemoRuns:
    """The scripted connection (once) and, while the order conversation has no run, a run at
    the start of its turn and a fork that fails its lookup."""
    report = DemoRuns()
    with app.app_context():
        project_id = db.session.scalar(select(Project.id).where(Project.slug == project_slug))
        if project_id is None:
            return report
        exists = db.session.scalar(
            select(ModelConnection.id).where(
                ModelConnection.project_id == project_id, ModelConnection.name == CONNECTION
            )
        )
        if exists is None:
            values = prepare_connection(
                ConnectionDraft(
                    name=CONNECTION,
                    kind="openai",
                    base_url=SCRIPTED_BASE_URL,
                    default_model=scripted_model.MODEL,
                )
            )
            db.session.commit()
            run_write(Write(store_connection, (project_id, values)))
            report.connection_added = True
        conversation = find_conversation(project_id, external_id=CONVERSATION)
        if conversation is None:
            return report
        has_runs = db.session.scalar(
            select(func.count())
            .select_from(ModelRun)
            .where(ModelRun.conversation_id == conversation.id)
        )
        if has_runs:
            db.session.commit()
            return report
        specs = [model_runs.RunSpec(CONNECTION, options={"as_of": "turn:1"})]
        fork = _fork(conversation)
        if fork is not None:
            specs.append(fork)
        db.session.commit()
        report.runs = [model_runs.create_run(project_id, conversation, s)["id"] for s in specs]
    return report


def _fork(conversation: Any) -> model_runs.RunSpec | None:
    """What if the order lookup had failed? Cut right after its result, rounds kept per
    service call: the agent answered from it; the scripted model calls it again."""
    history = replay_answer.load(conversation).history
    for m in history.messages:
        for c in m.tool_calls:
            if c.function_name == TOOL and c.external_id:
                done = max(c.created_at, c.response_created_at or c.created_at)
                return model_runs.RunSpec(
                    CONNECTION,
                    options={
                        "as_of": done.isoformat(),
                        "persistence": "per-service-call",
                        # Its result is the payload's last part: trailing, kept.
                        "trim_trailing": False,
                    },
                    edits=[{"type": "fail_call", "call_id": c.external_id, "message": FAILURE}],
                )
    return None
