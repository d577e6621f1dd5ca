"""Full-text search of tool calls (the calls explorer): SQLite FTS5, PostgreSQL tsvector + GIN

Revision ID: 3f6a1c9d2b7e
Revises: 99b645d72984
Create Date: 2026-11-23 21:30:00.000000

The statements are frozen copies of webapp/models.py's (a later change there gets a migration
of its own). Creating them fills them for the existing rows: the FTS5 table by one
INSERT ... SELECT, PostgreSQL's generated column as it is added (then the GIN index is built).
"""
from alembic import op

# revision identifiers, used by Alembic.
revision = "3f6a1c9d2b7e"
down_revision = "99b645d72984"
branch_labels = None
depends_on = None

N = 100_000
FTS = "tool_call_fts"


def _values(row):
    return f"substr({row}.arguments, 1, {N}), substr({row}.response, 1, {N})"


SQLITE_UP = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS} USING fts5("
    "arguments, response, content='', detail=none, tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER IF NOT EXISTS {FTS}_insert AFTER INSERT ON tool_invocation BEGIN "
    f"INSERT INTO {FTS}(rowid, arguments, response) VALUES (new.id, {_values('new')}); "
    "END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS}_delete AFTER DELETE ON tool_invocation BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, arguments, response) "
    f"VALUES ('delete', old.id, {_values('old')}); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS}_update AFTER UPDATE OF arguments, response "
    f"ON tool_invocation BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, arguments, response) "
    f"VALUES ('delete', old.id, {_values('old')}); "
    f"INSERT INTO {FTS}(rowid, arguments, response) VALUES (new.id, {_values('new')}); "
    "END",
    f"INSERT INTO {FTS}(rowid, arguments, response) "
    f"SELECT tool_invocation.id, {_values('tool_invocation')} FROM tool_invocation",
)
SQLITE_DOWN = (
    f"DROP TRIGGER IF EXISTS {FTS}_insert",
    f"DROP TRIGGER IF EXISTS {FTS}_delete",
    f"DROP TRIGGER IF EXISTS {FTS}_update",
    f"DROP TABLE IF EXISTS {FTS}",
)
PG_EXPRESSION = (
    "to_tsvector('simple'::regconfig, regexp_replace("
    f"left(coalesce(arguments::text, ''), {N}) || ' ' || "
    f"left(coalesce(response, ''), {N}), "
    r"'[!-/:-@\[-`{-~]+', ' ', 'g'))"
)
PG_UP = (
    # Adding a stored generated column computes it for every existing row.
    "ALTER TABLE tool_invocation ADD COLUMN IF NOT EXISTS search_document tsvector "
    f"GENERATED ALWAYS AS ({PG_EXPRESSION}) STORED",
    "CREATE INDEX IF NOT EXISTS ix_tool_invocation_search ON tool_invocation "
    "USING gin (search_document)",
)
PG_DOWN = (
    "DROP INDEX IF EXISTS ix_tool_invocation_search",
    "ALTER TABLE tool_invocation DROP COLUMN IF EXISTS search_document",
)


def upgrade():
    with op.batch_alter_table("tool_invocation", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tool_invocation_project_id_created_at_id",
            ["project_id", "created_at", "id"],
            unique=False,
        )
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_UP if dialect == "sqlite" else PG_UP:
        op.execute(statement)


def downgrade():
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_DOWN if dialect == "sqlite" else PG_DOWN:
        op.execute(statement)
    with op.batch_alter_table("tool_invocation", schema=None) as batch_op:
        batch_op.drop_index("ix_tool_invocation_project_id_created_at_id")
