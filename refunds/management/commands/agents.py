from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from nacl.signing import SigningKey

from refunds.agent.mandates import MAX_REPLAY_WINDOW, canonical_json, sign_mandate
from sill.accounts import two_factor
from sill.accounts.management.tokens import revoke_tokens
from sill.accounts.models import Agent, AgentKey, AgentToken, Site
from sill.accounts.services import (
    add_agent_key,
    b64url_decode,
    issue_agent_token,
    revoke_agent_token,
)
from sill.errors import SillError
from sill.ids import new_ulid


class Command(BaseCommand):
    # In refunds, not sill.accounts: `sign` uses the mandate signer of refunds.agent.
    help = (
        "Agents: `add-key`, `token` (prints a bearer token once), `revoke-token` (the one "
        "whose prefix is --prefix, else all of the agent's), `sign` (builds a mandate)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add-key", help="register an ed25519 public key for an agent")
        add.add_argument("--site", required=True)
        add.add_argument("--agent", required=True)
        add.add_argument("--key-id", required=True)
        add.add_argument("--public-key", required=True, help="32 bytes, base64url")
        add.add_argument("--valid-from", help="ISO 8601; default now")
        add.add_argument("--valid-until", help="ISO 8601; default none")
        add.add_argument(
            "--new-agent",
            action="store_true",
            help="create the agent if the site has none by that id (else it is refused)",
        )
        token = sub.add_parser("token", help="issue a bearer token for GET /api/v1/refunds/…")
        token.add_argument("--site", required=True)
        token.add_argument("--agent", required=True)
        revoke = sub.add_parser(
            "revoke-token",
            help="revoke an agent's bearer tokens: the one whose prefix is --prefix, else all",
        )
        revoke.add_argument("--site", required=True)
        revoke.add_argument("--agent", required=True)
        revoke.add_argument(
            "--prefix", help="the token's first 12 characters (sill_at_…), as Settings shows it"
        )
        sign = sub.add_parser("sign", help="build and sign a mandate; prints the JSON body")
        sign.add_argument(
            "--key-file", required=True, help="JSON with site_id, agent_id, key_id, private_key"
        )
        sign.add_argument("--intent", required=True, help="the intent object as JSON")
        sign.add_argument("--mandate-id", help="default: a new mnd_<ULID>")
        sign.add_argument("--window", type=int, default=120, help="seconds the mandate is valid")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, "_" + opts["action"].replace("-", "_"))(opts)
        except SillError as exc:
            raise CommandError(exc.message) from exc

    def _site(self, site_id: str) -> Site:
        site = Site.objects.filter(pk=site_id).first()
        if site is None:
            raise CommandError(f"no site {site_id}")
        return site

    def _add_key(self, opts: dict[str, Any]) -> None:
        site = self._site(opts["site"])
        try:
            public_key = b64url_decode(opts["public_key"])
        except ValueError as exc:
            raise CommandError("--public-key must be base64url") from exc
        valid_from = _when(opts["valid_from"], "--valid-from") or timezone.now()
        valid_until = _when(opts["valid_until"], "--valid-until")
        if valid_until is not None and valid_until <= valid_from:
            raise CommandError("--valid-until must be after --valid-from (default: now)")
        if not opts["new_agent"]:
            _check_agent_exists(site, opts["agent"])
        existed = AgentKey.objects.filter(
            agent__site=site, agent__agent_id=opts["agent"], key_id=opts["key_id"]
        ).exists()
        key = add_agent_key(
            site=site,
            agent_id=opts["agent"],
            key_id=opts["key_id"],
            public_key=public_key,
            valid_from=valid_from,
            valid_until=valid_until,
            actor=None,
            system=True,
            second_factor=two_factor.OPERATOR,
        )
        # Running it again with the same key changes nothing: say so, with the stored window.
        self.stdout.write(
            f"key {key.key_id} of {opts['agent']} on {site.id} "
            + ("is already registered, " if existed else "is ")
            + f"valid from {key.valid_from.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
        )

    def _agent(self, opts: dict[str, Any]) -> Agent:
        site = self._site(opts["site"])
        agent = Agent.objects.filter(site=site, agent_id=opts["agent"]).first()
        if agent is None:
            raise CommandError(f"no agent {opts['agent']} on {site.id}")
        return agent

    def _token(self, opts: dict[str, Any]) -> None:
        agent = self._agent(opts)
        self.stdout.write(
            issue_agent_token(
                agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
            )
        )

    def _revoke_token(self, opts: dict[str, Any]) -> None:
        # Each with its signed agent_change record (actor: the operator).
        agent = self._agent(opts)
        revoke_tokens(
            AgentToken.objects.filter(agent=agent),
            prefix=opts["prefix"],
            whose=f"{agent.agent_id} on {agent.site_id}",
            revoke=lambda token: revoke_agent_token(token=token, actor=None, system=True),
            write=self.stdout.write,
        )

    def _sign(self, opts: dict[str, Any]) -> None:
        try:
            key = json.loads(Path(opts["key_file"]).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read key file: {exc}") from exc
        fields = ("site_id", "agent_id", "key_id", "private_key")
        missing = [
            f for f in fields if not isinstance(key, dict) or not isinstance(key.get(f), str)
        ]
        if missing:
            raise CommandError(f"the key file lacks {', '.join(missing)} (text each)")
        try:
            signing_key = SigningKey(b64url_decode(key["private_key"]))
        except ValueError as exc:
            raise CommandError(f"cannot read key file: {exc}") from exc
        if not 1 <= opts["window"] <= MAX_REPLAY_WINDOW:
            raise CommandError(
                f"--window is seconds from 1 to {MAX_REPLAY_WINDOW} (what Sill accepts)"
            )
        try:
            intent = json.loads(opts["intent"], parse_float=__import__("decimal").Decimal)
        except ValueError as exc:
            raise CommandError(f"--intent is not JSON: {exc}") from exc
        now = datetime.now(UTC).replace(microsecond=0)
        signed = {
            "mandate_id": opts["mandate_id"] or f"mnd_{new_ulid()}",
            "site_id": key["site_id"],
            "agent_id": key["agent_id"],
            "issued_at": now.isoformat().replace("+00:00", "Z"),
            "expires_at": (now + timedelta(seconds=opts["window"]))
            .isoformat()
            .replace("+00:00", "Z"),
            "nonce": secrets.token_urlsafe(16),
            "replay_window_seconds": opts["window"],
            "principal": {"type": "human", "verification": "delegated"},
            "intent": intent,
        }
        document = sign_mandate(signed, signing_key, key["key_id"])
        self.stdout.write(canonical_json(document).decode("utf-8"))


# How many of a site's agents an unknown --agent's refusal names.
_AGENTS_NAMED = 20


def _check_agent_exists(site: Site, agent_id: str) -> None:
    """Refuse ``agent_id`` when ``site`` has no such agent: a typo must not create a second
    agent holding the key (and signing mandates) beside the one the operator meant."""
    if Agent.objects.filter(site=site, agent_id=agent_id).exists():
        return
    ids = list(
        Agent.objects.filter(site=site)
        .order_by("agent_id")
        .values_list("agent_id", flat=True)[: _AGENTS_NAMED + 1]
    )
    known = ", ".join(ids[:_AGENTS_NAMED]) + (", …" if len(ids) > _AGENTS_NAMED else "")
    raise CommandError(
        f"no agent {agent_id} on {site.id} ({f'its agents: {known}' if ids else 'it has none'}); "
        "to create it with this key, add --new-agent"
    )


def _when(text: str | None, option: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(
            f"{option} {text!r} is not an ISO 8601 time (e.g. 2026-10-01T00:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise CommandError("timestamps need a timezone (e.g. 2026-10-01T00:00:00Z)")
    return value
