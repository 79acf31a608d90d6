"""``inasched token create|list|revoke``: API tokens, written straight into the job store.

No service and no token are needed: whoever can write the store is trusted with it, which is
how the first admin token is made (``inasched token create NAME --admin``). Creating a token
never creates a store by accident: a store that does not exist yet is made only with ``--init``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.settings import Settings
from api.store.db import DatabaseUnavailable, create_db_engine, open_database, redacted
from cli.jobs import ExitCode, fail

__all__ = ["UP_TOKEN_FILE", "add_token_parser", "run_tokens", "store_exists", "up_token"]


def add_token_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``token`` and its actions under `sub`."""
    token = sub.add_parser(
        "token",
        help="create, list and revoke API tokens",
        description="API tokens, written straight into the job store (no service or token "
        "needed: this is how the first admin token is made). A tenant token sees its own jobs; "
        "an admin token also changes the policy, sees every tenant's jobs and manages tokens.",
    )
    tsub = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    tc = tsub.add_parser("create", help="create a token for TENANT and print it")
    tc.add_argument("tenant", help="tenant name, 1-64 of A-Z a-z 0-9 . _ @ - (created if new)")
    tc.add_argument("--admin", action="store_true", help="an admin token (policy, tokens, all)")
    tc.add_argument(
        "--init", action="store_true", help="create the store if there is none there yet"
    )
    tl = tsub.add_parser("list", help="list every token: tenant, role, created, revoked")
    tr = tsub.add_parser("revoke", help="revoke every token of TENANT (refused at once)")
    tr.add_argument("tenant", help="tenant name")
    for p in (tc, tl, tr):
        p.add_argument("--data-dir", help="where the SQLite store is (default ./data)")
        p.add_argument("--database-url", help="the store's SQLAlchemy URL, instead of --data-dir")


def store_exists(url: str) -> bool:
    """True when `url` holds an inasched store (its SQLite file exists; a server database has
    been migrated). Raises `DatabaseUnavailable` when the database cannot be asked."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            return bool(parsed.database) and Path(str(parsed.database)).is_file()
        engine = create_db_engine(url, pool_size=1)
        try:
            return inspect(engine).has_table("alembic_version")
        finally:
            engine.dispose()
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseUnavailable(f"cannot use the database {redacted(url)}: {reason}") from exc


def run_tokens(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``inasched token ACTION``; returns the exit status."""
    from api.store.tokens import BadTenantName, check_tenant_name

    url = settings.resolved_database_url
    if args.action == "create":
        try:
            check_tenant_name(args.tenant)
        except BadTenantName as exc:
            return fail(str(exc))
    try:
        exists = store_exists(url)
    except DatabaseUnavailable as exc:
        return fail(str(exc), ExitCode.UNREACHABLE)
    if not exists and not getattr(args, "init", False):
        where = f"--data-dir {settings.data_dir}" if not settings.database.url else redacted(url)
        hint = " (pass --init to create one)" if args.action == "create" else ""
        return fail(
            f"there is no inasched store at {where}: give the --data-dir or --database-url "
            f"of the service's store{hint}"
        )
    try:
        engine, sessions = open_database(url)
    except DatabaseUnavailable as exc:
        return fail(str(exc), ExitCode.UNREACHABLE)
    actions: dict[str, Callable[[Session, argparse.Namespace], int]] = {
        "create": _create, "list": _list, "revoke": _revoke,
    }  # fmt: skip
    try:
        with sessions() as session:
            return actions[args.action](session, args)
    finally:
        engine.dispose()


def _create(session: Session, args: argparse.Namespace) -> int:
    from api.store.crud import create_tenant_token

    print(create_tenant_token(session, tenant=args.tenant, admin=args.admin))
    return 0


def _list(session: Session, _: argparse.Namespace) -> int:
    from api.store.tokens import list_tokens

    rows = [("ID", "TENANT", "ROLE", "CREATED", "REVOKED")]
    for t in list_tokens(session):
        revoked = t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "-"
        role = "admin" if t.admin else "tenant"
        rows.append(
            (str(t.id), t.tenant.name, role, t.created_at.isoformat(timespec="seconds"), revoked)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _revoke(session: Session, args: argparse.Namespace) -> int:
    from api.store.tokens import revoke_tokens

    revoked = revoke_tokens(session, tenant=args.tenant)
    if revoked is None:
        return fail(f"no tenant '{args.tenant}' (see 'inasched token list')", ExitCode.REFUSED)
    session.commit()
    print(f"revoked {len(revoked)} token(s) of tenant '{args.tenant}'")
    return 0


# Where `inasched up` keeps the tenant token it printed, so that the next start prints the same
# one (a token is stored only as its hash, so the store cannot give it back).
UP_TOKEN_FILE = "up-token"


def up_token(session: Session, *, tenant: str, data_dir: Path) -> tuple[str, bool]:
    """``(token, reused)``: the tenant token `inasched up` printed before for `tenant` (kept,
    readable by its owner only, in `data_dir`), while it is live; else a new one, kept there
    for the next start. One start after another leaves one live token, not one per start."""
    from api.store.crud import create_tenant_token
    from api.store.tokens import live_token

    saved = data_dir / UP_TOKEN_FILE
    try:
        kept_tenant, kept = saved.read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        kept_tenant = kept = ""
    row = live_token(session, token=kept) if kept else None
    if row is not None and kept_tenant == tenant and row.tenant.name == tenant and not row.admin:
        return kept, True
    token = create_tenant_token(session, tenant=tenant)
    data_dir.mkdir(parents=True, exist_ok=True)
    partial = saved.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"{tenant} {token}\n")
    partial.replace(saved)
    return token, False
