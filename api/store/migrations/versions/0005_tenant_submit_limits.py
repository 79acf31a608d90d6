"""tenants.max_priority_class, submit_rate, submit_burst: what a tenant may submit

All nullable: an existing tenant keeps the service's defaults until an admin sets its own.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_priority_class", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("submit_rate", sa.Float(), nullable=True))
        batch.add_column(sa.Column("submit_burst", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("submit_burst")
        batch.drop_column("submit_rate")
        batch.drop_column("max_priority_class")
