"""Timestamps on SQLite: the one-step text `UTCDateTime` binds is exactly what SQLAlchemy's two
steps (UTC, naive, then DATETIME's storage format) wrote before, so rows written before and after
compare, sort and read back alike; naive datetimes are still refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite

from webapp.db import SQLITE_DATETIME_FORMAT, UTCDateTime

OFFSETS = st.builds(
    timezone,
    st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
    ),
)
# Away from year 1 and 9999, where the conversion to UTC overflows either way.
AWARE = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=OFFSETS
)


def _two_steps(value: datetime) -> str:
    dialect = sqlite.dialect()
    naive = UTCDateTime().process_bind_param(value, dialect)
    return sqlite.DATETIME().bind_processor(dialect)(naive)


def test_the_format_is_sqlalchemys_default():
    assert sqlite.DATETIME()._storage_format == SQLITE_DATETIME_FORMAT


@given(AWARE)
def test_one_step_text_is_the_two_steps_text(value):
    process = UTCDateTime().bind_processor(sqlite.dialect())
    assert process(value) == _two_steps(value)


def test_naive_and_none():
    process = UTCDateTime().bind_processor(sqlite.dialect())
    assert process(None) is None
    with pytest.raises(ValueError, match="naive"):
        process(datetime(2026, 11, 27, 12))


def test_round_trip_through_a_real_sqlite_file(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path}/t.db")
    table = sa.Table("t", sa.MetaData(), sa.Column("at", UTCDateTime()))
    table.metadata.create_all(engine)
    values = [
        datetime(2026, 11, 27, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 11, 28, 1, 0, tzinfo=timezone(timedelta(hours=2))),  # 23:00 UTC
        datetime(1999, 1, 1, tzinfo=UTC),
    ]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"at": v} for v in values])
        stored = conn.execute(sa.text("SELECT at FROM t ORDER BY at")).scalars().all()
        read = conn.execute(sa.select(table.c.at).order_by(table.c.at)).scalars().all()
        later = conn.execute(sa.select(table.c.at).where(table.c.at > values[1])).scalars().all()
    assert stored == [
        "1999-01-01 00:00:00.000000",
        "2026-11-27 23:00:00.000000",
        "2026-11-27 23:59:59.999999",
    ]
    assert read == sorted(values)
    assert later == [values[0]]
