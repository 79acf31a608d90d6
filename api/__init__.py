"""The inasched service: REST API, job store, scheduling loop and the ``inasched`` CLI.

- `api.app.create_app(settings)` builds the FastAPI app (routes in `api.routes`, one module per
  resource); `api.settings.Settings` is its configuration (``INASCHED_*`` variables).
- `api.scheduling.Coordinator` drives the scheduler's policy and is the only writer to the
  switch (through `p4ctl.backend.SwitchBackend`); `api.rendezvous` serves the workers.
- `api.models` and `api.store` are the job store (SQLAlchemy 2, Alembic migrations in
  ``api/migrations``); `api.cli.main` is the console script.
"""
