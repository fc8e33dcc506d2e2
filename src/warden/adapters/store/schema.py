"""The registry schema as SQLAlchemy Core metadata (the source for Alembic migrations).

Times are ISO-8601 UTC text so the same statements run on SQLite and PostgreSQL.
JSON columns hold text documents.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()

workspaces = Table(
    "workspaces", metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("path", Text, nullable=False),
    Column("type", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("template", String(128)),
    Column("layer_id", String(80)),
    Column("created_at", String(40), nullable=False),
    Column("last_accessed", String(40), nullable=False),
    Column("expires_at", String(40)),
    Column("created_by", String(128)),
    Column("meta", Text, nullable=False, server_default="{}"),
    Column("node", String(255)),  # the node whose folder it is (core/nodes.py); NULL only before 0007
)
Index("ix_workspaces_status", workspaces.c.status)
Index("ix_workspaces_node", workspaces.c.node)

audit_events = Table(
    "audit_events", metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", String(40), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("action", String(80), nullable=False),
    Column("target", Text, nullable=False),
    Column("decision", String(16), nullable=False),
    Column("rule", Text, nullable=False),
    Column("result", String(200), nullable=False),
    Column("detail", Text, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
)
Index("ix_audit_target", audit_events.c.target)

bots = Table(
    "bots", metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(64), nullable=False, unique=True),
    # HMAC-SHA256 of the identity token under the pepper; the token itself is never stored.
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", String(40), nullable=False),
    Column("created_by", String(200), nullable=False),
)

grants = Table(
    "grants", metadata,
    Column("accessor", String(40), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("parent_accessor", String(40)),
    Column("workspace", String(64), nullable=False),
    Column("workspace_id", String(40), nullable=False),
    Column("bot", String(64), nullable=False),
    Column("permissions", String(80), nullable=False),
    Column("zones", Text),  # JSON list, or NULL for the whole workspace
    Column("secrets", Text, nullable=False, server_default="[]"),  # JSON list of names
    Column("created_at", String(40), nullable=False),
    Column("expires_at", String(40), nullable=False),
    Column("max_expires_at", String(40), nullable=False),
    Column("revoked_at", String(40)),
    Column("created_by", String(200), nullable=False),
    # JSON list of the domains its commands may ask to reach (core.network entries)
    Column("domains", Text, nullable=False, server_default="[]"),
)
Index("ix_grants_workspace", grants.c.workspace)
Index("ix_grants_bot", grants.c.bot)
Index("ix_grants_parent", grants.c.parent_accessor)

secrets = Table(
    "secrets", metadata,
    Column("name", String(128), primary_key=True),
    Column("ciphertext", Text, nullable=False),  # base64 of AES-GCM output (with the tag)
    Column("nonce", String(32), nullable=False),  # base64
    Column("key_id", String(40), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
)

# One row per workspace name (core/leases): changed by compare-and-set on `version`.
workspace_leases = Table(
    "workspace_leases", metadata,
    Column("workspace", String(64), primary_key=True),
    Column("fence", Integer, nullable=False, server_default="0"),
    Column("version", Integer, nullable=False, server_default="1"),
    Column("holders", Text, nullable=False, server_default="[]"),
    Column("terminal_lock", Text),  # a terminal's lock (core/locks.py), JSON; NULL: none
)

# A run's intent, written (with its audit row) before the command starts and removed with its
# outcome: what is left when the process that ran it is gone is a run whose end was lost.
runs_in_progress = Table(
    "runs_in_progress", metadata,
    Column("run_id", String(40), primary_key=True),
    Column("workspace", String(64), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("node", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pid_start", Integer, nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("argv", Text, nullable=False),
)

# Live sandboxes (core/live.py): one row per running one, found by its key on its node. A
# sandbox outlives the Warden process that started it; any process of its node reaches it here.
live_sandboxes = Table(
    "live_sandboxes", metadata,
    Column("id", String(40), primary_key=True),
    Column("workspace", String(64), nullable=False),
    Column("workspace_id", String(40), nullable=False),
    Column("principal", String(200), nullable=False),
    Column("network", String(80), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("node", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pid_start", BigInteger, nullable=False),
    Column("supervisor_pid", Integer, nullable=False),
    Column("supervisor_start", BigInteger, nullable=False),
    Column("socket", Text, nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("last_used", String(40), nullable=False),
    Column("meta", Text, nullable=False, server_default="{}"),
    UniqueConstraint("node", "workspace", "principal", "network", name="uq_live_sandboxes_key"),
)
Index("ix_live_sandboxes_workspace", live_sandboxes.c.workspace)

# Background processes of live sandboxes: written as one starts, ended with its outcome (the
# `run` audit event). Running ones of bots count against api.max_execs and max_execs_per_bot.
live_processes = Table(
    "live_processes", metadata,
    Column("id", String(40), primary_key=True),
    Column("sandbox_id", String(40), nullable=False),
    Column("workspace", String(64), nullable=False),
    Column("principal", String(200), nullable=False),
    Column("bot", String(64), nullable=False, server_default=""),
    Column("argv", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("exit_code", Integer),
    Column("signal", Integer),
    Column("timed_out", Integer, nullable=False, server_default="0"),
    Column("started_at", String(40), nullable=False),
    Column("ended_at", String(40)),
    Column("node", String(255), nullable=False),
    Column("meta", Text, nullable=False, server_default="{}"),
)
Index("ix_live_processes_workspace", live_processes.c.workspace)
Index("ix_live_processes_sandbox", live_processes.c.sandbox_id)
Index("ix_live_processes_status", live_processes.c.status, live_processes.c.bot)

# Approvals (core/approvals.py): a bot's `ask` operation waiting for a person, with the bytes of
# a write, so that whoever answers (on any node) carries out exactly what was asked.
approvals = Table(
    "approvals", metadata,
    Column("id", String(40), primary_key=True),
    Column("workspace", String(64), nullable=False),
    Column("workspace_id", String(40), nullable=False),
    Column("op", String(16), nullable=False),
    Column("path", Text, nullable=False),
    Column("destination", Text),
    Column("requester", String(200), nullable=False),
    Column("bot", String(64), nullable=False),
    Column("minter", String(64), nullable=False),  # the bot holding the root of the asking grant's chain
    Column("accessor", String(40), nullable=False),
    Column("zone", String(64)),
    Column("rule", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("expires_at", String(40), nullable=False),
    Column("digest", String(64)),
    Column("size", BigInteger),
    Column("content", LargeBinary),
    Column("detail", Text, nullable=False, server_default="{}"),
    Column("answered_by", String(200)),
    Column("answered_at", String(40)),
    Column("note", Text),
    Column("outcome", Text, nullable=False, server_default="{}"),
)
Index("ix_approvals_status", approvals.c.status, approvals.c.workspace)
Index("ix_approvals_minter", approvals.c.minter, approvals.c.status)

# Running Warden processes (core/nodes.py) with their heartbeats; the `nodes` view is derived.
instances = Table(
    "instances", metadata,
    Column("id", String(40), primary_key=True),
    Column("node", String(255), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pid_start", BigInteger, nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("heartbeat_at", String(40), nullable=False),
    Column("url", Text),
    Column("terminal", String(200)),
)
Index("ix_instances_node", instances.c.node)

# Nonces of node-to-node requests accepted lately: a replayed one is refused (core/nodes.py).
node_nonces = Table(
    "node_nonces", metadata,
    Column("nonce", String(32), primary_key=True),
    Column("seen_at", String(40), nullable=False),
)
Index("ix_node_nonces_seen", node_nonces.c.seen_at)

# The cluster keyring (core/keyring.py): the token pepper and secrets data keys of a shared
# registry, each wrapped under the cluster key that nodes hold outside the database. One
# `cluster_keyring` row (id 1) carries the version every change compares-and-sets and the
# check value of the cluster key.
cluster_keyring = Table(
    "cluster_keyring", metadata,
    Column("id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("kek_id", String(40), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
)

cluster_keys = Table(
    "cluster_keys", metadata,
    Column("id", String(40), primary_key=True),
    Column("purpose", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("wrapped", Text, nullable=False),  # base64 of nonce + AES-GCM ciphertext and tag
    Column("kek_id", String(40), nullable=False),
    Column("created_at", String(40), nullable=False),
)
