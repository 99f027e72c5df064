"""The scheduled cleanup on an in-process platform (sqlite3 with the real migrations)."""

import asyncio
import sqlite3
from pathlib import Path

from devkit.sqlite import SqliteExecutor
from multillm_edge.storage import cleanup
from multillm_edge.core import config

ROOT = Path(__file__).resolve().parents[2]
NOW = 2_000_000_000


class Platform:
    def __init__(self, db, vars=None):
        self.db, self.vars, self.logs = db, vars or {}, []

    def var(self, name):
        return self.vars.get(name)

    def now(self):
        return NOW

    def log(self, record):
        self.logs.append(record)


def migrated():
    conn = sqlite3.connect(":memory:")
    for f in sorted((ROOT / "migrations").glob("*.sql")):
        conn.executescript(f.read_text())
    return conn


def seed(conn, n, expires, authority="roleplay"):
    conn.executemany(
        "INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, "
        "sha256, byte_length, r2_key, created_at, expires_at, signature) "
        "VALUES (?, ?, 'p', 's', 1, 'x', 1, 'k', 0, ?, 'sig')",
        [(f"cp_{authority}_{expires}_{i}", authority, expires) for i in range(n)])
    conn.commit()


def count(conn):
    return conn.execute("SELECT COUNT(*) FROM context_pages").fetchone()[0]


def test_deletes_rows_expired_beyond_retention_and_logs_counts():
    conn = migrated()
    retention = config.DEFAULT_EXPIRED_ROW_RETENTION_SECONDS
    seed(conn, 3, NOW - retention - 1)
    seed(conn, 2, NOW - retention - 1, authority="managed")
    seed(conn, 4, NOW - retention + 1)
    platform = Platform(SqliteExecutor(conn))
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert platform.logs == [record]
    assert {k: v for k, v in record.items() if k != "ms"} == \
        {"route": "scheduled", "deleted": 3, "batches": 1, "more": False,
         "requests_deleted": 0, "requests_more": False,
         "usage_deleted": 0, "usage_batches": 1, "usage_more": False}
    assert count(conn) == 6


def test_retention_setting_is_honoured():
    conn = migrated()
    seed(conn, 2, NOW - 100)
    platform = Platform(SqliteExecutor(conn), {"EXPIRED_ROW_RETENTION_SECONDS": "60"})
    assert asyncio.run(cleanup.scheduled_cleanup(platform))["deleted"] == 2


def test_failure_is_logged_by_type_only():
    conn = sqlite3.connect(":memory:")      # no tables
    platform = Platform(SqliteExecutor(conn))
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert record["error"] == "OperationalError" and "deleted" not in record
    assert set(record) == {"route", "error", "ms"}
    assert asyncio.run(cleanup.scheduled_cleanup(Platform(None)))["error"] == "d1_unbound"


def test_deletes_request_window_rows_that_left_the_window_in_bounded_batches(monkeypatch):
    """principal_requests rows older than the 60 s window go (design §4.1); those in it stay."""
    conn = migrated()
    monkeypatch.setattr(config, "CLEANUP_BATCH_ROWS", 10)
    monkeypatch.setattr(config, "CLEANUP_MAX_BATCHES", 2)
    conn.executemany("INSERT INTO principal_requests (principal, at) VALUES (?, ?)",
                     [("p", NOW - 60 - i) for i in range(25)] + [("p", NOW - 59 + i) for i in range(5)])
    conn.commit()
    platform = Platform(SqliteExecutor(conn))
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert (record["requests_deleted"], record["requests_more"]) == (20, True)
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert (record["requests_deleted"], record["requests_more"]) == (5, False)
    assert sorted(r[0] for r in conn.execute("SELECT at FROM principal_requests")) == \
        [NOW - 59 + i for i in range(5)]


def seed_usage(conn, days):
    conn.executemany("INSERT INTO principal_usage (principal, day, model, requests, input_tokens) "
                     "VALUES ('p', ?, 'fake:m', 1, 5)", [(d,) for d in days])
    conn.commit()


def usage_days(conn):
    return [r[0] for r in conn.execute("SELECT day FROM principal_usage ORDER BY day")]


def test_usage_rows_older_than_the_retention_go_in_bounded_batches(monkeypatch):
    # NOW is 2033-05-18 (UTC): 90 days kept, today included, are 2033-02-18 .. 2033-05-18.
    conn = migrated()
    seed_usage(conn, ["2033-02-16", "2033-02-17", "2033-02-18", "2033-05-18"])
    platform = Platform(SqliteExecutor(conn))
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert (record["usage_deleted"], record["usage_more"]) == (2, False)
    assert usage_days(conn) == ["2033-02-18", "2033-05-18"]
    # the var: 1 day keeps today only
    platform.vars["USAGE_RETENTION_DAYS"] = "1"
    assert asyncio.run(cleanup.scheduled_cleanup(platform))["usage_deleted"] == 1
    assert usage_days(conn) == ["2033-05-18"]
    # bounded: at most CLEANUP_BATCH_ROWS per statement, CLEANUP_MAX_BATCHES statements
    monkeypatch.setattr(config, "CLEANUP_BATCH_ROWS", 3)
    monkeypatch.setattr(config, "CLEANUP_MAX_BATCHES", 2)
    seed_usage(conn, [f"2020-01-{d:02d}" for d in range(1, 11)])
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert (record["usage_deleted"], record["usage_batches"], record["usage_more"]) == (6, 2, True)
    record = asyncio.run(cleanup.scheduled_cleanup(platform))
    assert (record["usage_deleted"], record["usage_more"]) == (4, False)
    assert usage_days(conn) == ["2033-05-18"]
    # an invalid value is the default (90 days)
    platform.vars["USAGE_RETENTION_DAYS"] = "-3"
    assert asyncio.run(cleanup.scheduled_cleanup(platform))["usage_deleted"] == 0
