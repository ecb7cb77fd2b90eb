"""The results database's schema as append-only migrations; `PRAGMA user_version` is the step reached.

Kept apart from the store so the SQL history reads as one list; `Store` applies the steps it has not seen.
"""

from __future__ import annotations

#: Schema migrations: (version reached, SQL). Append only; never edit a released step.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE runs (
            id            INTEGER PRIMARY KEY AUTOINCREMENT,
            created_at    REAL NOT NULL,
            finished_at   REAL,
            status        TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'cancelled')),
            error         TEXT,
            label         TEXT,
            suite         TEXT,
            url           TEXT,
            model         TEXT,
            mtp           INTEGER,            -- 1 on, 0 off, NULL unknown
            owner_pid     INTEGER,
            owner_host    TEXT,
            settings_json TEXT,               -- the full Settings snapshot (or what attach mode saw)
            config_json   TEXT,               -- probe options: repeat, n_predict, seed, temperature...
            server_json   TEXT,               -- version, build_info, capabilities, props
            hardware_json TEXT,               -- GPUs (real or simulated) and host
            plan_json     TEXT,               -- the planner's prediction
            memory_json   TEXT,               -- memory llama.cpp reported at launch
            summary_json  TEXT,
            warnings_json TEXT NOT NULL DEFAULT '[]'
        );
        CREATE TABLE requests (
            run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            seq           INTEGER NOT NULL,
            prompt        TEXT NOT NULL,
            kind          TEXT NOT NULL,
            repeat        INTEGER NOT NULL,
            n_predict     INTEGER,
            started_at    REAL,
            ttft_ms       REAL,
            wall_ms       REAL,
            timings_json  TEXT,               -- the server's `timings`, verbatim
            metrics_json  TEXT,               -- /metrics counter deltas
            finish_reason TEXT,
            error         TEXT,
            content_chars INTEGER,
            PRIMARY KEY (run_id, seq)
        );
        CREATE INDEX runs_created ON runs(created_at);
        """,
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def statements(sql: str) -> list[str]:
    """Split a migration script on `;` outside comments (our scripts have no `;` in strings)."""
    lines = [ln.split("--", 1)[0] for ln in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
