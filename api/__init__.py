"""The inasched service, in three rooms and a shared vocabulary.

- `api.http`: the FastAPI app (`api.http.app.create_app(settings)`), one router per resource
  (`api.http.routes`), dependency aliases, Prometheus text and the offline API docs.
- `api.coordinator`: the scheduling loop (`Coordinator`), the decision rounds, batched
  submissions, quotas, the workers' rendezvous, leader and standby, and `Service`, the running
  parts behind one app. It is the only writer to the switch (`p4ctl.backend.SwitchBackend`).
- `api.store`: the job store: SQLAlchemy 2 models, Alembic migrations, data functions
  (`api.store.crud`), API tokens and the one-service-per-store lock.
- `api.settings`, `api.schemas`, `api.errors`, `api.security`: the configuration, the request
  and response bodies, the exception tree and token digests every room uses.

Rooms import downwards only: http -> coordinator -> store -> the shared vocabulary.
"""
