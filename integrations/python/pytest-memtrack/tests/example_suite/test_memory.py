"""A real suite for pytest-memtrack, run under `memtrack run` by
integrations/memtrack-c/tests/pytest_plugin.rs: tests allocating from Python and from C
extensions (json's _json, sqlite3's _sqlite3 and libsqlite3), some breaking their
limits on purpose. Which pass and which fail is what that test checks."""

import json
import sqlite3

import pytest

MiB = 1024 * 1024
kept = []


def test_nothing():
    """Allocates nothing: its region must count zero blocks (the plugin's own work
    inside the region allocates nothing either)."""


@pytest.mark.limit_memory("24 MB")
def test_within_limit_memory():
    data = bytearray(10 * MiB)  # one malloc of 10 MiB + 1 byte
    del data


@pytest.mark.limit_memory("1 MB")
def test_breaks_limit_memory():
    data = bytearray(4 * MiB)  # one malloc of 4 MiB + 1 byte
    del data


@pytest.mark.limit_allocations(1_000_000)
def test_json_round_trip():
    rows = [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(2000)]
    text = json.dumps(rows)  # the _json C extension builds one large string
    assert json.loads(text) == rows


@pytest.mark.limit_leaks("1 MB")
def test_sqlite3_in_memory():
    db = sqlite3.connect(":memory:")  # libsqlite3 allocates with malloc
    db.execute("create table t (id integer primary key, payload text)")
    db.executemany("insert into t (payload) values (?)", [("x" * 100,) for _ in range(1000)])
    assert db.execute("select count(*) from t").fetchone() == (1000,)
    db.close()


@pytest.mark.limit_allocations(5)
def test_breaks_limit_allocations():
    blocks = [bytearray(1000) for _ in range(10)]  # ten mallocs of 1001 bytes
    del blocks


@pytest.mark.limit_leaks("1 KB")
def test_breaks_limit_leaks():
    kept.append(bytearray(100_000))  # one malloc of 100,001 bytes, kept
