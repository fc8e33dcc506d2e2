"""initial registry: workspaces and the audit log

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("template", sa.String(128)),
        sa.Column("layer_id", sa.String(80)),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("last_accessed", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40)),
        sa.Column("created_by", sa.String(128)),
        sa.Column("meta", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_workspaces_status", "workspaces", ["status"])
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.String(40), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(80), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("result", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_target", "audit_events", ["target"])

    op.create_table(
        "bots",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
    )
    op.create_table(
        "grants",
        sa.Column("accessor", sa.String(40), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("parent_accessor", sa.String(40)),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("bot", sa.String(64), nullable=False),
        sa.Column("permissions", sa.String(80), nullable=False),
        sa.Column("zones", sa.Text),
        sa.Column("secrets", sa.Text, nullable=False, server_default="[]"),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
        sa.Column("max_expires_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40)),
        sa.Column("created_by", sa.String(200), nullable=False),
    )
    op.create_index("ix_grants_workspace", "grants", ["workspace"])
    op.create_index("ix_grants_bot", "grants", ["bot"])
    op.create_index("ix_grants_parent", "grants", ["parent_accessor"])
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("ciphertext", sa.Text, nullable=False),
        sa.Column("nonce", sa.String(32), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("secrets")
    op.drop_table("grants")
    op.drop_table("bots")
    op.drop_table("audit_events")
    op.drop_table("workspaces")
