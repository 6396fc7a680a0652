"""Revoking an agent's key takes only the key's row, never its site's (PostgreSQL, threads).

Every append to a site's audit chain (a refund's decision, a settlement, a member change)
holds the chain head until it commits, and its commit checks its foreign keys to the site:
``FOR KEY SHARE`` of the site's row. A revocation that locked the site's row ``FOR UPDATE``
(its ``select_for_update()`` joined the agent and the site) and then appended its own record
deadlocked with such an append: the owner's Revoke answered a server error and the key stayed
unrevoked.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from nacl.signing import SigningKey

from sill.accounts import two_factor
from sill.accounts.models import AgentKey
from sill.accounts.services import add_agent_key, revoke_agent_key
from tests.conftest import site_owner
from tests.threads import run_while_an_append_commits

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_revoking_a_key_never_deadlocks_with_an_append_of_the_site(site, agent):
    key = add_agent_key(  # its key_change record starts the site's chain
        site=site, agent_id=agent.agent_id, key_id="k1",
        public_key=bytes(SigningKey(bytes(32)).verify_key),
        valid_from=datetime(2026, 1, 1, tzinfo=UTC), actor=site_owner(site),
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    owner = site_owner(site)

    revoked = run_while_an_append_commits(
        site_id=site.pk,
        run=lambda: revoke_agent_key(
            key=AgentKey.objects.select_related("agent__site").get(pk=key.pk), actor=owner
        ),
    )

    assert isinstance(revoked, AgentKey), revoked
    assert AgentKey.objects.get(pk=key.pk).revoked_at is not None
