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


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("workspaces")
