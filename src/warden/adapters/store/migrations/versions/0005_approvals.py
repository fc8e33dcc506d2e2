"""approvals: bots' ask operations waiting for a person

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("destination", sa.Text),
        sa.Column("requester", sa.String(200), nullable=False),
        sa.Column("bot", sa.String(64), nullable=False),
        sa.Column("minter", sa.String(64), nullable=False),
        sa.Column("accessor", sa.String(40), nullable=False),
        sa.Column("zone", sa.String(64)),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
        sa.Column("digest", sa.String(64)),
        sa.Column("size", sa.BigInteger),
        sa.Column("content", sa.LargeBinary),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
        sa.Column("answered_by", sa.String(200)),
        sa.Column("answered_at", sa.String(40)),
        sa.Column("note", sa.Text),
        sa.Column("outcome", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_approvals_status", "approvals", ["status", "workspace"])
    op.create_index("ix_approvals_minter", "approvals", ["minter", "status"])


def downgrade() -> None:
    op.drop_index("ix_approvals_minter", "approvals")
    op.drop_index("ix_approvals_status", "approvals")
    op.drop_table("approvals")
