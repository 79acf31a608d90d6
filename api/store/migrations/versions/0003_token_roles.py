"""api_tokens.admin and api_tokens.revoked_at; bench_runs.tenant_id (runs owned by a tenant)

Existing tokens become tenant tokens (not admin) and stay valid; existing benchmark runs have
no owner and are seen by admins only. Batch mode, so that SQLite (which cannot add a foreign
key to a table) copies the table, while PostgreSQL alters it in place.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(
            sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("bench_runs") as batch:
        batch.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_bench_runs_tenant_id_tenants", "tenants", ["tenant_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_bench_runs_tenant_id", ["tenant_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("bench_runs") as batch:
        batch.drop_index("ix_bench_runs_tenant_id")
        batch.drop_constraint("fk_bench_runs_tenant_id_tenants", type_="foreignkey")
        batch.drop_column("tenant_id")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("admin")
