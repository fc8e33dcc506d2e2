"""the domains a grant's commands may ask to reach

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A JSON list of core.network entries; grants made before it reach no network ("[]").
    with op.batch_alter_table("grants") as batch:
        batch.add_column(sa.Column("domains", sa.Text, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("grants") as batch:
        batch.drop_column("domains")
