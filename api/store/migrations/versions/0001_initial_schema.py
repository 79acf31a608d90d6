"""initial schema

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "bench_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workload", sa.String(length=256), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "service_state",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("client_key", sa.String(length=128), nullable=True),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=512), nullable=True),
        sa.Column("policy", sa.String(length=16), nullable=True),
        sa.Column("priority_class", sa.Integer(), nullable=False),
        sa.Column("priority_level", sa.Integer(), nullable=False),
        sa.Column("n_workers", sa.Integer(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("iterations_done", sa.Integer(), nullable=False),
        sa.Column("gradient_bytes", sa.BigInteger(), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=True),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("jct_s", sa.Float(), nullable=True),
        sa.Column("bytes_switch", sa.BigInteger(), nullable=False),
        sa.Column("bytes_ps", sa.BigInteger(), nullable=False),
        sa.Column("bypassed", sa.BigInteger(), nullable=False),
        sa.Column("preemptions_caused", sa.BigInteger(), nullable=False),
        sa.Column("preemptions_suffered", sa.BigInteger(), nullable=False),
        sa.Column("switch_job_id", sa.Integer(), nullable=True),
        sa.Column("part_base", sa.Integer(), nullable=True),
        sa.Column("part_slots", sa.Integer(), nullable=True),
        sa.Column("hash_seed", sa.BigInteger(), nullable=True),
        sa.Column("counter_base", sa.JSON(), nullable=True),
        sa.Column("join_token_hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "client_key", name="uq_jobs_client_key"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_switch_job_id"), ["switch_job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "priority_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("t", sa.Float(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("priority_changes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_priority_changes_job_id"), ["job_id"], unique=False)

    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.Column("iterations_done", sa.Integer(), nullable=False),
        sa.Column("bytes_switch", sa.BigInteger(), nullable=False),
        sa.Column("bytes_ps", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "worker_id", name="uq_workers_job_worker"),
    )
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workers_job_id"), ["job_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workers_job_id"))

    op.drop_table("workers")
    with op.batch_alter_table("priority_changes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_priority_changes_job_id"))

    op.drop_table("priority_changes")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_tenant_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_switch_job_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_state"))

    op.drop_table("jobs")
    op.drop_table("api_tokens")
    op.drop_table("tenants")
    op.drop_table("service_state")
    op.drop_table("bench_runs")
