"""Tenant API tokens and job join tokens: generated here, stored only as SHA-256 digests.

A token is 32 random bytes, so a plain SHA-256 digest is enough to make a leaked database
useless for logging in (a slow password hash protects guessable secrets; these are not).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["JOIN_PREFIX", "TENANT_PREFIX", "hash_token", "new_token", "same_digest"]

TENANT_PREFIX = "ina_t_"
JOIN_PREFIX = "ina_j_"


def new_token(prefix: str) -> str:
    """A fresh random token, e.g. ``"ina_t_3q2...``" (the prefix says what it opens)."""
    return prefix + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The hex SHA-256 of `token`, as stored in the database."""
    return hashlib.sha256(token.encode()).hexdigest()


def same_digest(token: str, digest: str) -> bool:
    """True when `token` hashes to `digest` (constant-time comparison)."""
    return hmac.compare_digest(hash_token(token), digest)
