"""Alembic environment: runs on the connection `api.store.db.migrate` hands in (no alembic.ini)."""

from __future__ import annotations

from alembic import context

from api.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through api.store.db.migrate(engine)")
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
