"""workspace leases and runs in progress

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workspace_leases",
        sa.Column("workspace", sa.String(64), primary_key=True),
        sa.Column("fence", sa.Integer, nullable=False, server_default="0"),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("holders", sa.Text, nullable=False, server_default="[]"),
    )
    op.create_table(
        "runs_in_progress",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("pid_start", sa.Integer, nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("argv", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runs_in_progress")
    op.drop_table("workspace_leases")
