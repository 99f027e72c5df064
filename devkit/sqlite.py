"""`store.Executor` over a sqlite3 connection: the tests' D1, and the admin CLI's local one.

The Worker's SQL (src/multillm_edge/storage/store.py) runs on it unchanged, against the real
migrations.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Optional

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def migrated_connection(path: str = ":memory:") -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    for f in sorted(MIGRATIONS.glob("*.sql")):
        conn.executescript(f.read_text())
    return conn


class SqliteExecutor:
    """Executor over a sqlite3 connection (tests, tools). Autocommits each `run`."""

    def __init__(self, conn):
        self.conn = conn

    def _cursor(self, sql: str, params: list):
        return self.conn.execute(sql, list(params))

    @staticmethod
    def _row(cur, row) -> dict:
        return {d[0]: v for d, v in zip(cur.description, row)}

    async def first(self, sql: str, params: list) -> Optional[dict]:
        cur = self._cursor(sql, params)
        row = cur.fetchone()
        return None if row is None else self._row(cur, row)

    async def all(self, sql: str, params: list) -> list[dict]:
        cur = self._cursor(sql, params)
        rows = [self._row(cur, r) for r in cur.fetchall()]
        if self.conn.in_transaction:   # a write with RETURNING
            self.conn.commit()
        return rows

    async def batch(self, statements: list) -> list[list[dict]]:
        """As D1's batch: the statements in order, one transaction (all or nothing)."""
        out = []
        try:
            for sql, params in statements:
                cur = self._cursor(sql, params)
                out.append([self._row(cur, r) for r in cur.fetchall()] if cur.description else [])
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()
        return out

    async def run(self, sql: str, params: list) -> int:
        # cursor.rowcount is -1 for statements starting with WITH (CPython only counts
        # statements it recognizes as DML); total_changes counts like D1's meta.changes.
        before = self.conn.total_changes
        self._cursor(sql, params)
        changed = self.conn.total_changes - before
        self.conn.commit()
        return changed
