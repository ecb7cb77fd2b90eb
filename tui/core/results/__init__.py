"""The results database.

store   `Store` / `open_store`: every probe run with its settings, server, hardware and requests
schema  the SQL as append-only migrations (`MIGRATIONS`, `SCHEMA_VERSION`)
"""
