"""``/tokens`` and ``/tenants/{name}/tokens``: API tokens, managed with an admin token.

The same as ``inasched token create|list|revoke``, which writes the store directly (and so
makes the first admin token: the REST API never mints a token without an admin's).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path

from api.errors import NotFound
from api.http.deps import AdminDep, ServiceDep, SessionDep
from api.schemas import TenantName, TokenCreate, TokenCreated, TokenPublic
from api.store.crud import create_tenant_token
from api.store.models import ApiToken
from api.store.tokens import list_tokens, live_admin_tokens, live_token, revoke_tokens

router = APIRouter(tags=["tokens"])

ADMIN_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"description": "the token is a tenant token, not an admin token"}
}


def token_public(row: ApiToken) -> TokenPublic:
    return TokenPublic(
        id=row.id,
        tenant=row.tenant.name,
        admin=row.admin,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


@router.get("/tokens", responses=ADMIN_ONLY, summary="every API token (admin token)")
def index(_: AdminDep, session: SessionDep) -> list[TokenPublic]:
    """``[{"id", "tenant", "admin", "created_at", "revoked_at"}]``, oldest first, revoked ones
    included; the tokens themselves are never stored, so never shown."""
    return [token_public(row) for row in list_tokens(session)]


@router.post(
    "/tokens", status_code=201, responses=ADMIN_ONLY, summary="create an API token (admin token)"
)
def create(body: TokenCreate, _: AdminDep, session: SessionDep) -> TokenCreated:
    """The new token (shown only here) for ``tenant``, which is created if new."""
    token = create_tenant_token(session, tenant=body.tenant, admin=body.admin)
    row = live_token(session, token=token)
    assert row is not None
    return TokenCreated(**token_public(row).model_dump(), token=token)


@router.delete(
    "/tenants/{name}/tokens",
    responses={
        **ADMIN_ONLY,
        404: {"description": "no tenant of that name"},
        409: {"description": "it would revoke the last admin token"},
    },
    summary="revoke every token of a tenant (admin token)",
)
def revoke(
    name: Annotated[TenantName, Path(description="the tenant")],
    _: AdminDep,
    session: SessionDep,
    service: ServiceDep,
) -> list[TokenPublic]:
    """The tokens revoked now (``[]`` when all were revoked already). They are refused with 401
    from the next request on. Revoking the last admin token is refused with 409 (the command
    line, ``inasched token revoke NAME``, still can: it needs the store, not a token)."""
    revoked = revoke_tokens(session, tenant=name)
    if revoked is None:
        raise NotFound(f"no tenant '{name}'")
    if any(row.admin for row in revoked) and live_admin_tokens(session) == 0:
        session.rollback()
        raise HTTPException(
            409,
            f"that would revoke the last admin token (tenant '{name}'); create another admin "
            "token first",
        )
    session.commit()
    service.events.end_streams({row.token_hash for row in revoked})
    return [token_public(row) for row in revoked]
