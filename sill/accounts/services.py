"""Writes to sites, members and agents."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from sill.accounts.models import (
    Agent,
    AgentKey,
    AgentToken,
    Membership,
    MemberToken,
    Role,
    Site,
)
from sill.errors import SillError


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@transaction.atomic
def add_member(
    *, site: Site, email: str, role: str, can_refund: bool = False, password: str | None = None
) -> Membership:
    """Create (or update) the user ``email`` and make them ``role`` on ``site``."""
    if role not in Role.values:
        raise SillError(f"role must be one of {', '.join(Role.values)}", code="invalid_field")
    email = email.strip().lower()
    if "@" not in email:
        raise SillError("email must be an email address", code="invalid_field", field="email")
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=email, defaults={"email": email})
    if password:
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    membership, _ = Membership.objects.update_or_create(
        user=user, site=site, defaults={"role": role, "can_refund": can_refund}
    )
    return membership


@transaction.atomic
def add_agent_key(
    *,
    site: Site,
    agent_id: str,
    key_id: str,
    public_key: bytes,
    valid_from: datetime,
    valid_until: datetime | None = None,
    agent_name: str | None = None,
) -> AgentKey:
    """Register an ed25519 public key for ``agent_id`` (creating the agent if needed)."""
    if len(public_key) != 32:
        raise SillError("an ed25519 public key is 32 bytes", code="invalid_field")
    agent, _ = Agent.objects.get_or_create(
        site=site, agent_id=agent_id, defaults={"name": agent_name or agent_id}
    )
    key, created = AgentKey.objects.get_or_create(
        agent=agent,
        key_id=key_id,
        defaults={"public_key": public_key, "valid_from": valid_from, "valid_until": valid_until},
    )
    if not created and bytes(key.public_key) != public_key:
        raise SillError(
            f"key {key_id} of {agent_id} already exists with another public key; "
            "use a new key id to rotate",
            code="key_conflict",
        )
    if created:
        record_key_change(key=key, action="add")
    return key


def record_key_change(*, key: AgentKey, action: str) -> None:
    """Write the signed ``key_change`` record for an agent key (inside the caller's transaction)."""
    from audit.services import append_record

    append_record(
        site=key.agent.site,
        kind="key_change",
        body={
            "action": action,
            "agent_id": key.agent.agent_id,
            "key_id": key.key_id,
            "public_key": b64url_encode(bytes(key.public_key)),
            "valid_from": key.valid_from.isoformat(),
            "valid_until": key.valid_until.isoformat() if key.valid_until else None,
            "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
        },
    )


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_agent_token(*, agent: Agent) -> str:
    """Create a bearer token for ``agent``; only its hash is stored, so it is shown once."""
    token = "sill_at_" + secrets.token_urlsafe(32)
    AgentToken.objects.create(agent=agent, token_sha256=token_sha256(token), prefix=token[:12])
    return token


def issue_member_token(*, membership: Membership) -> str:
    """Create a bearer token acting as ``membership``; only its hash is stored."""
    token = "sill_mt_" + secrets.token_urlsafe(32)
    MemberToken.objects.create(
        membership=membership, token_sha256=token_sha256(token), prefix=token[:12]
    )
    return token
