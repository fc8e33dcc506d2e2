"""nodes: instances with heartbeats, node-to-node nonces, the node of every workspace

Revision ID: 0007
Revises: 0006
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("pid_start", sa.BigInteger, nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("heartbeat_at", sa.String(40), nullable=False),
        sa.Column("url", sa.Text),
        sa.Column("terminal", sa.String(200)),
    )
    op.create_index("ix_instances_node", "instances", ["node"])
    op.create_table(
        "node_nonces",
        sa.Column("nonce", sa.String(32), primary_key=True),
        sa.Column("seen_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_node_nonces_seen", "node_nonces", ["seen_at"])
    op.add_column("workspaces", sa.Column("node", sa.String(255)))
    op.create_index("ix_workspaces_node", "workspaces", ["node"])
    # Backfilled from the host the metadata kept; rows without one belong to the node that
    # migrates (the caller passes its name: a migration reads no environment).
    config = op.get_context().config
    this_node = config.attributes.get("warden_node") if config is not None else None
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, meta FROM workspaces")).fetchall()
    for row_id, meta in rows:
        try:
            host = json.loads(meta or "{}").get("host")
        except (ValueError, AttributeError):
            host = None
        node = host if isinstance(host, str) and host else this_node
        if node:
            conn.execute(sa.text("UPDATE workspaces SET node = :node WHERE id = :id"), {"node": node, "id": row_id})


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_index("ix_workspaces_node")
        batch.drop_column("node")
    op.drop_table("node_nonces")
    op.drop_table("instances")
