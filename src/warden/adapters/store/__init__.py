"""The registry store: one set of portable SQL statements, run on SQLite or PostgreSQL."""
