"""Channels (named replay policies) and redaction rules: a project's settings over the API."""

from __future__ import annotations

from flask import g, jsonify
from flask_openapi3 import Tag
from sqlalchemy import delete, select, update

from ..db import db, utcnow
from ..errors import ApiError
from ..ingest import Conflict, Invalid, ensure_channel
from ..models import Channel, RedactionRule
from ..redaction import validate_rule
from . import bp, serializers
from .endpoint import endpoint
from .schemas import (
    WRITE_ERRORS,
    ChannelList,
    ChannelOut,
    ChannelPath,
    ChannelPut,
    RedactionRuleCreate,
    RedactionRuleList,
    RedactionRuleOut,
    RulePath,
    error_responses,
)

CHANNEL_TAG = Tag(name="Channels", description="Per-channel replay freshness windows.")
RULE_TAG = Tag(name="Redaction rules", description="Applied to tool calls before storage.")
CHANNEL = Channel.__table__
RULE = RedactionRule.__table__


def _channels(project_id: int, name: str | None = None) -> list[dict]:
    stmt = select(CHANNEL).where(CHANNEL.c.project_id == project_id).order_by(CHANNEL.c.name)
    if name is not None:
        stmt = stmt.where(CHANNEL.c.name == name)
    return [serializers.channel(r) for r in db.session.execute(stmt).mappings()]


def _rules(project_id: int) -> list[dict]:
    stmt = select(RULE).where(RULE.c.project_id == project_id).order_by(RULE.c.id)
    return [serializers.redaction_rule(r) for r in db.session.execute(stmt).mappings()]


@bp.put(
    "/channels/<name>",
    tags=[CHANNEL_TAG],
    summary="Create a channel or set its freshness window",
    responses={200: ChannelOut, 201: ChannelOut, **WRITE_ERRORS},
)
@endpoint(write=True)
def channel_put(path: ChannelPath, body: ChannelPut):
    """`freshness_seconds: null` uses the project's window. 201 created, 200 updated."""
    name = path.name
    if not name or len(name) > 200 or "\x00" in name:
        raise Invalid("path.name", "must be 1 to 200 characters")
    project_id = g.project.id
    existed = bool(_channels(project_id, name))
    channel_id = ensure_channel(project_id, name, utcnow())
    db.session.execute(
        update(CHANNEL)
        .where(CHANNEL.c.id == channel_id)
        .values(freshness_seconds=body.freshness_seconds)
    )
    return jsonify(_channels(project_id, name)[0]), 200 if existed else 201


@bp.get(
    "/channels",
    tags=[CHANNEL_TAG],
    summary="List channels",
    responses={200: ChannelList},
)
@endpoint()
def channels_get():
    return jsonify(serializers.listing(_channels(g.project.id)))


@bp.get(
    "/redaction-rules",
    tags=[RULE_TAG],
    summary="List redaction rules",
    responses={200: RedactionRuleList},
)
@endpoint()
def redaction_rules_get():
    return jsonify(serializers.listing(_rules(g.project.id)))


@bp.post(
    "/redaction-rules",
    tags=[RULE_TAG],
    summary="Add a redaction rule",
    responses={201: RedactionRuleOut, **WRITE_ERRORS},
)
@endpoint(write=True)
def redaction_rules_post(body: RedactionRuleCreate):
    """Rules apply to calls stored from now on; stored calls are not rewritten. Names are
    unique within a project (409 otherwise)."""
    problem = validate_rule(body.kind, body.value)
    if problem:
        raise Invalid("value", problem)
    project_id = g.project.id
    taken = db.session.execute(
        select(RULE.c.id).where(RULE.c.project_id == project_id, RULE.c.name == body.name)
    ).first()
    if taken is not None:
        raise Conflict(
            f"a redaction rule named {body.name!r} already exists",
            [{"field": "name", "id": taken.id}],
        )
    row = (
        db.session.execute(
            RULE.insert()
            .values(
                project_id=project_id,
                name=body.name,
                function_name=body.function_name,
                kind=body.kind,
                value=list(body.value) if body.kind != "skip" else [],
                enabled=body.enabled,
                created_at=utcnow(),
            )
            .returning(*RULE.c)
        )
        .mappings()
        .one()
    )
    return jsonify(serializers.redaction_rule(row)), 201


@bp.delete(
    "/redaction-rules/<rule_id>",
    tags=[RULE_TAG],
    summary="Delete a redaction rule",
    responses={204: None, **error_responses(404, 422, 503)},
)
@endpoint(write=True)
def redaction_rule_delete(path: RulePath):
    deleted = db.session.execute(
        delete(RULE)
        .where(RULE.c.id == path.rule_id, RULE.c.project_id == g.project.id)
        .returning(RULE.c.id)
    ).first()
    if deleted is None:
        raise ApiError(404, f"redaction rule {path.rule_id} not found in this project")
    return "", 204
