"""terminal locks on the workspace lease row

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workspace_leases", sa.Column("terminal_lock", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("workspace_leases") as batch:
        batch.drop_column("terminal_lock")
