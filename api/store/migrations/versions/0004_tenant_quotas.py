"""tenants.max_jobs and tenants.aggregator_share: a tenant's own quota

Both nullable: an existing tenant keeps the service's default quota until an admin sets its own.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_jobs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("aggregator_share", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("aggregator_share")
        batch.drop_column("max_jobs")
