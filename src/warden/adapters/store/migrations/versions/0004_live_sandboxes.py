"""live sandboxes and their background processes

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "live_sandboxes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("network", sa.String(80), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("fence", sa.BigInteger, nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("pid_start", sa.BigInteger, nullable=False),
        sa.Column("supervisor_pid", sa.Integer, nullable=False),
        sa.Column("supervisor_start", sa.BigInteger, nullable=False),
        sa.Column("socket", sa.Text, nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("last_used", sa.String(40), nullable=False),
        sa.Column("meta", sa.Text, nullable=False, server_default="{}"),
        sa.UniqueConstraint("node", "workspace", "principal", "network", name="uq_live_sandboxes_key"),
    )
    op.create_index("ix_live_sandboxes_workspace", "live_sandboxes", ["workspace"])
    op.create_table(
        "live_processes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("sandbox_id", sa.String(40), nullable=False),
        sa.Column("workspace", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("bot", sa.String(64), nullable=False, server_default=""),
        sa.Column("argv", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("signal", sa.Integer),
        sa.Column("timed_out", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("ended_at", sa.String(40)),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("meta", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_live_processes_workspace", "live_processes", ["workspace"])
    op.create_index("ix_live_processes_sandbox", "live_processes", ["sandbox_id"])
    op.create_index("ix_live_processes_status", "live_processes", ["status", "bot"])


def downgrade() -> None:
    op.drop_table("live_processes")
    op.drop_table("live_sandboxes")
