"""jobs.shared_pool: the shared pool a hashed job hashes into

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("shared_pool", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "shared_pool")
