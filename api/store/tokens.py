"""Tenant API tokens in the store: who a token is, the token list, revocation, tenant names.

A token is either a tenant token (its tenant's jobs, the switch as that tenant sees it) or an
admin token (also: the policy, every tenant's jobs, the tokens). Revoking sets ``revoked_at``;
every request looks its token up afresh, so a revoked token is refused from the next request on.
Like `api.store.crud`, nothing here commits unless the docstring says so.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from api.security import hash_token
from api.store.models import ApiToken, Tenant, utcnow

__all__ = [
    "TENANT_NAME_MAX",
    "BadTenantName",
    "Caller",
    "OwnSubmitLimits",
    "TenantRef",
    "check_tenant_name",
    "list_tokens",
    "live_admin_tokens",
    "live_caller",
    "live_callers",
    "live_digests",
    "live_token",
    "revoke_tokens",
]

# tenants.name is VARCHAR(64).
TENANT_NAME_MAX = 64
# A name that is safe in a URL path (DELETE /tenants/{name}/tokens), a log line and a shell.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")


class BadTenantName(ValueError):
    """A tenant name that cannot be stored; the message says what a good one looks like."""


@dataclass(frozen=True, slots=True)
class TenantRef:
    """A tenant as a request's caller: its id and name (a plain value, not an ORM row)."""

    id: int
    name: str


@dataclass(frozen=True, slots=True)
class OwnSubmitLimits:
    """What an admin set for what one tenant may submit; None: the service's default
    (`api.coordinator.admission`)."""

    max_priority_class: int | None = None
    submit_rate: float | None = None
    submit_burst: int | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the tenant of its token, whether that token is an admin token, and
    the tenant's own submission limits."""

    tenant: TenantRef
    admin: bool
    own: OwnSubmitLimits = OwnSubmitLimits()


def check_tenant_name(name: str) -> None:
    """Raise `BadTenantName` unless `name` is 1 to 64 letters, digits, '.', '_', '@' or '-',
    starting with a letter or digit."""
    if not name.strip():
        raise BadTenantName("the tenant name is empty: give one, e.g. 'alice'")
    if len(name) > TENANT_NAME_MAX:
        raise BadTenantName(
            f"the tenant name is {len(name)} characters long; at most {TENANT_NAME_MAX}"
        )
    if TENANT_NAME.fullmatch(name) is None:
        raise BadTenantName(
            f"the tenant name {name!r} has other characters than letters, digits, "
            "'.', '_', '@' and '-' (or does not start with a letter or digit)"
        )


def live_token(session: Session, *, token: str) -> ApiToken | None:
    """The stored, not revoked API token `token` (with its tenant), or None."""
    return session.scalar(
        select(ApiToken).where(
            ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None)
        )
    )


def live_caller(session: Session, *, token: str) -> Caller | None:
    """The caller whose live API token is `token`, or None: one indexed read of plain columns
    (every request makes it, so a revocation counts from the next request on)."""
    return live_callers(session, tokens=(token,)).get(token)


# Built once: building the statement on every call cost about as much as running it.
_LIVE_CALLERS = (
    select(
        ApiToken.token_hash,
        Tenant.id,
        Tenant.name,
        ApiToken.admin,
        Tenant.max_priority_class,
        Tenant.submit_rate,
        Tenant.submit_burst,
    )
    .join(ApiToken, ApiToken.tenant_id == Tenant.id)
    .where(
        ApiToken.token_hash.in_(bindparam("hashes", expanding=True)),
        ApiToken.revoked_at.is_(None),
    )
)


def live_callers(session: Session, *, tokens: Iterable[str]) -> dict[str, Caller]:
    """The caller of each of `tokens` that is a live API token, by token; one indexed read
    for any number (a batch of submissions checks its tokens together)."""
    by_hash = {hash_token(token): token for token in set(tokens)}
    rows = session.execute(_LIVE_CALLERS, {"hashes": list(by_hash)})
    return {
        by_hash[row.token_hash]: Caller(
            TenantRef(row.id, row.name),
            row.admin,
            OwnSubmitLimits(row.max_priority_class, row.submit_rate, row.submit_burst),
        )
        for row in rows
    }


def list_tokens(session: Session) -> Sequence[ApiToken]:
    """Every API token, revoked ones included, oldest first (digests only: never the token)."""
    return session.scalars(select(ApiToken).order_by(ApiToken.id)).all()


def revoke_tokens(session: Session, *, tenant: str) -> Sequence[ApiToken] | None:
    """Revoke every live token of `tenant` (no commit); returns them, or None when there is no
    such tenant. A tenant whose tokens are all revoked already gets ``[]``."""
    row = session.scalar(select(Tenant).where(Tenant.name == tenant))
    if row is None:
        return None
    tokens = session.scalars(
        select(ApiToken).where(ApiToken.tenant_id == row.id, ApiToken.revoked_at.is_(None))
    ).all()
    now = utcnow()
    for token in tokens:
        token.revoked_at = now
    session.flush()
    return tokens


def live_digests(session: Session, *, digests: Collection[str]) -> set[str]:
    """Those of the token `digests` that belong to live (not revoked) tokens: one indexed read."""
    if not digests:
        return set()
    stmt = select(ApiToken.token_hash).where(
        ApiToken.token_hash.in_(sorted(digests)), ApiToken.revoked_at.is_(None)
    )
    return set(session.scalars(stmt))


def live_admin_tokens(session: Session) -> int:
    """How many admin tokens are not revoked."""
    stmt = select(func.count()).select_from(ApiToken)
    return session.scalar(stmt.where(ApiToken.admin, ApiToken.revoked_at.is_(None))) or 0
