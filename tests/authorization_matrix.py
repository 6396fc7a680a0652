"""The authorization matrix: every URL pattern x method x role, with the expected answer.

tests/test_authorization_matrix.py walks the URL conf and checks that this table names
every pattern (and no pattern that is gone), then sends each (pattern, method, role) request
and compares the answer with the row. To add a URL, add a row to ``MATRIX`` under its name
(``namespace:name``): the path arguments it needs (``ARGS`` kinds, built by the test) and,
per method, one of the role profiles below (or a new ``answers(...)`` line). A row that names
GET alone says the page changes nothing: the test expects 405 for every other method.

Roles, in column order:
    owner, admin, reviewer     members of the primary site in that role
    staff                      a staff member *without* the refund permission
    refunder                   a staff member *with* the refund permission (``can_refund``)
    outsider                   an owner of *another* site (its objects are the primary site's)
    anonymous                  nobody signed in

Answers (two-factor is off under pytest, so none of these asks for a code):
    OK          allowed: any answer but 401, 403, 404 or a redirect to the login page
                (an empty form answering 400/422 is allowed: the matrix is about authorization)
    FORBIDDEN   403
    NOT_FOUND   404 (another site's object: lookups are scoped to the actor's site)
    LOGIN       302 to the login page
    UNAUTHORIZED 401 (an API without credentials)
    BAD_REQUEST 400 (a webhook without a valid signature: the signature is the credential)
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("owner", "admin", "reviewer", "staff", "refunder", "outsider", "anonymous")

OK = "allowed"
FORBIDDEN = "403"
NOT_FOUND = "404"
LOGIN = "login"
UNAUTHORIZED = "401"
BAD_REQUEST = "400"


def answers(*per_role: str) -> dict[str, str]:
    """One answer per role, in ``ROLES`` order."""
    assert len(per_role) == len(ROLES), per_role
    return dict(zip(ROLES, per_role, strict=True))


# fmt: off
#                         owner      admin      reviewer   staff      refunder   outsider   anonymous
EVERYONE      = answers(OK,        OK,        OK,        OK,        OK,        OK,        OK)
MEMBERS       = answers(OK,        OK,        OK,        OK,        OK,        OK,        LOGIN)
# The same, on an object of the primary site: another site's owner does not find it.
MEMBERS_OBJ   = answers(OK,        OK,        OK,        OK,        OK,        NOT_FOUND, LOGIN)
REVIEWERS     = answers(OK,        OK,        OK,        FORBIDDEN, FORBIDDEN, OK,        LOGIN)
REVIEWERS_OBJ = answers(OK,        OK,        OK,        FORBIDDEN, FORBIDDEN, NOT_FOUND, LOGIN)
REFUNDERS_OBJ = answers(OK,        OK,        FORBIDDEN, FORBIDDEN, OK,        NOT_FOUND, LOGIN)
# A refund's page: the held queue's readers and those who make refunds (not staff without it).
REFUND_READERS_OBJ = answers(OK,   OK,        OK,        FORBIDDEN, OK,        NOT_FOUND, LOGIN)
MANAGERS      = answers(OK,        OK,        FORBIDDEN, FORBIDDEN, FORBIDDEN, OK,        LOGIN)
MANAGERS_OBJ  = answers(OK,        OK,        FORBIDDEN, FORBIDDEN, FORBIDDEN, NOT_FOUND, LOGIN)
OWNER_OBJ     = answers(OK,        FORBIDDEN, FORBIDDEN, FORBIDDEN, FORBIDDEN, NOT_FOUND, LOGIN)
# The member-token / session APIs: JSON answers, 401 without credentials.
API_REFUNDERS_OBJ = answers(OK,    OK,        FORBIDDEN, FORBIDDEN, OK,        NOT_FOUND, UNAUTHORIZED)
API_MANAGERS_OBJ  = answers(OK,    OK,        FORBIDDEN, FORBIDDEN, FORBIDDEN, NOT_FOUND, UNAUTHORIZED)
API_MEMBERS   = answers(OK,        OK,        OK,        OK,        OK,        OK,        UNAUTHORIZED)
API_MEMBERS_OBJ = answers(OK,      OK,        OK,        OK,        OK,        NOT_FOUND, UNAUTHORIZED)
# The agent API takes an agent's bearer token only: a member's session is no credential.
AGENT_ONLY    = answers(UNAUTHORIZED, UNAUTHORIZED, UNAUTHORIZED, UNAUTHORIZED, UNAUTHORIZED,
                        UNAUTHORIZED, UNAUTHORIZED)
# Signed by the sender (a mandate, a provider's webhook): a session changes nothing, and an
# unsigned body is refused as malformed.
SIGNED        = answers(BAD_REQUEST, BAD_REQUEST, BAD_REQUEST, BAD_REQUEST, BAD_REQUEST,
                        BAD_REQUEST, BAD_REQUEST)
# An emailed invitation link: anyone may open it; only its addressee (signed out, or signed in
# as that address) may accept it, so another signed-in user's POST is refused.
INVITE_LINK   = answers(FORBIDDEN, FORBIDDEN, FORBIDDEN, FORBIDDEN, FORBIDDEN, FORBIDDEN, OK)
# Slack's clicks: a site without a signing secret has no endpoint (404 for everyone).
SIGNED_OR_UNSET = answers(NOT_FOUND, NOT_FOUND, NOT_FOUND, NOT_FOUND, NOT_FOUND, NOT_FOUND,
                          NOT_FOUND)
# Sends everyone to the login page (signing out; the code step without a pending sign-in).
TO_LOGIN      = answers(LOGIN,     LOGIN,     LOGIN,     LOGIN,     LOGIN,     LOGIN,     LOGIN)
# DRF's session authentication has no challenge to offer, so DRF answers an anonymous
# caller 403 (code ``not_authenticated``) rather than 401 on these two policy endpoints.
SESSION_API_MEMBERS = answers(OK,  OK,        OK,        OK,        OK,        OK,        FORBIDDEN)
SESSION_API_MANAGERS_OBJ = answers(OK, OK,    FORBIDDEN, FORBIDDEN, FORBIDDEN, NOT_FOUND, FORBIDDEN)
# fmt: on


@dataclass(frozen=True)
class Row:
    """One URL pattern: its path arguments (kwarg → ``ARGS`` kind), answers per method, and
    the form a POST sends (empty unless a view validates the form before it looks the object
    up: then a valid form, so another site's owner reaches the lookup)."""

    args: dict[str, str] = field(default_factory=dict)
    methods: dict[str, dict[str, str]] = field(default_factory=dict)
    body: dict[str, str] = field(default_factory=dict)


def row(
    args: dict[str, str] | None = None,
    *,
    body: dict[str, str] | None = None,
    **methods: dict[str, str],
) -> Row:
    return Row(args=args or {}, methods=methods, body=body or {})


# The kinds of path argument the test knows how to build (objects of the primary site).
ARGS = (
    "order",  # a paid order on the mock rail
    "held",  # a refund an agent asked for, held for review
    "attention",  # a refund whose answer was lost: needs attention
    "reason",  # a merchant's own refund reason
    "member",  # a staff membership (not one of the personas)
    "member_token",  # that staff membership's API token (its pk)
    "agent",  # an agent
    "key",  # that agent's public key
    "agent_token",  # that agent's bearer token (its pk)
    "rail",  # the mock rail's name
    "item",  # an open reconciliation item
    "rule",  # a policy rule of the site
    "template",  # a catalog template id (not a site object)
    "mandate",  # the mandate id of the held refund
    "site",  # the primary site's id
    "invite",  # a pending invitation to the primary site (its pk)
    "invite_token",  # the link token of a pending invitation to the primary site
    "reset_uid",  # a password-reset link's user part (a made-up one: the link is invalid)
    "reset_token",  # a password-reset link's token (made up)
    "logged_site",  # the primary site's id, its log holding records and a signed checkpoint
    "checkpoint_size",  # the size of that checkpoint
    "version",  # the number of one of the primary site's policy versions
)

MATRIX: dict[str, Row] = {
    # --- signing in ---------------------------------------------------------------------------
    "accounts:login": row(GET=EVERYONE, POST=EVERYONE, PUT=EVERYONE),  # its FormView takes PUT
    "accounts:logout": row(POST=TO_LOGIN),
    "accounts:login-code": row(GET=TO_LOGIN, POST=TO_LOGIN),
    "accounts:switch_site": row(POST=MEMBERS),
    "accounts:invite": row({"token": "invite_token"}, GET=EVERYONE, POST=INVITE_LINK),
    "accounts:password-reset": row(GET=EVERYONE, POST=EVERYONE),
    "accounts:password-reset-done": row(GET=EVERYONE),
    "accounts:password-reset-complete": row(GET=EVERYONE),
    "accounts:password-reset-confirm": row(
        {"uidb64": "reset_uid", "token": "reset_token"}, GET=EVERYONE, POST=EVERYONE
    ),
    # --- orders and refunds -------------------------------------------------------------------
    "orders:dashboard": row(GET=MEMBERS),
    "orders:list": row(GET=MEMBERS),
    "orders:detail": row({"order_id": "order"}, GET=MEMBERS_OBJ),
    "orders:resolve-charge-attention": row({"order_id": "order"}, POST=OWNER_OBJ),
    "refunds:list": row(GET=MEMBERS),
    "refunds:detail": row({"refund_id": "held"}, GET=REFUND_READERS_OBJ),
    "refunds:order-refund": row({"order_id": "order"}, POST=REFUNDERS_OBJ),
    "refunds:order-refund-preview": row({"order_id": "order"}, GET=REFUNDERS_OBJ),
    "refunds:staff-refund-api": row({"order_id": "order"}, POST=API_REFUNDERS_OBJ),
    "refunds:held": row(GET=REVIEWERS),
    "refunds:held-detail": row({"refund_id": "held"}, GET=REVIEWERS_OBJ),
    "refunds:held-approve": row({"refund_id": "held"}, POST=MANAGERS_OBJ),
    "refunds:held-reject": row({"refund_id": "held"}, POST=MANAGERS_OBJ),
    "refunds:resolve-attention": row({"refund_id": "attention"}, POST=OWNER_OBJ),
    "refunds:failure-handled": row({"refund_id": "held"}, POST=MANAGERS_OBJ),
    "refunds:reconcile": row(GET=MANAGERS),
    "refunds:reconcile-resolve": row(
        {"item_id": "item"}, body={"resolution": "acknowledged", "note": "m"}, POST=MANAGERS_OBJ
    ),
    # --- the agent API ------------------------------------------------------------------------
    "refunds:mandates": row(POST=SIGNED),
    "refunds:agent-me": row(GET=AGENT_ONLY),
    "refunds:refund-detail": row({"mandate_id": "mandate"}, GET=AGENT_ONLY),
    "refunds:slack-interactions": row({"site_id": "site"}, POST=SIGNED_OR_UNSET),
    "refunds:slack-settings": row(GET=MANAGERS, POST=MANAGERS),
    # --- refund reasons -----------------------------------------------------------------------
    "refunds:reasons": row(GET=MANAGERS),
    "refunds:reason-add": row(POST=MANAGERS),
    "refunds:reason-rename": row({"reason_id": "reason"}, POST=MANAGERS_OBJ),
    "refunds:reason-move": row({"reason_id": "reason"}, POST=MANAGERS_OBJ),
    "refunds:reason-deactivate": row({"reason_id": "reason"}, POST=MANAGERS_OBJ),
    "refunds:reason-reactivate": row({"reason_id": "reason"}, POST=MANAGERS_OBJ),
    "refunds:reason-delete": row({"reason_id": "reason"}, POST=MANAGERS_OBJ),
    # --- rules --------------------------------------------------------------------------------
    "policies:rules": row(GET=MEMBERS),
    "policies:auto-refund": row(POST=MANAGERS),
    "policies:protect-add": row(POST=MANAGERS),
    "policies:refund-window": row(POST=MANAGERS),
    "policies:version-restore": row({"number": "version"}, POST=MANAGERS_OBJ),
    "policies:templates": row(GET=MEMBERS),
    "policies:template-preview": row({"item_id": "template"}, GET=MANAGERS),
    "policies:template-apply": row({"item_id": "template"}, POST=MANAGERS),
    "policies:rule-mode": row({"rule_id": "rule"}, body={"mode": "observe"}, POST=MANAGERS_OBJ),
    "policies:rule-delete": row({"rule_id": "rule"}, POST=MANAGERS_OBJ),
    "policies:api-templates": row(GET=SESSION_API_MEMBERS),
    "policies:api-from-template": row({"site_id": "site"}, POST=SESSION_API_MANAGERS_OBJ),
    "policies:api-rules": row({"site_id": "site"}, GET=API_MEMBERS_OBJ, POST=API_MANAGERS_OBJ),
    "policies:api-rule": row({"site_id": "site", "rule_id": "rule"}, DELETE=API_MANAGERS_OBJ),
    # --- activity -----------------------------------------------------------------------------
    "audit:activity": row(GET=REVIEWERS),
    "audit:activity-verify": row(POST=REVIEWERS),
    "refunds:evidence": row({"refund_id": "held"}, GET=REVIEWERS_OBJ),
    "orders:evidence": row({"order_id": "purchase"}, GET=REVIEWERS_OBJ),
    # --- the transparency log: public by design (hashes and sizes only) ------------------------
    "transparency:keys": row(GET=EVERYONE),
    "transparency:checkpoint": row({"site_id": "logged_site"}, GET=EVERYONE),
    "transparency:checkpoint-at": row(
        {"site_id": "logged_site", "size": "checkpoint_size"}, GET=EVERYONE
    ),
    "transparency:inclusion-proof": row({"site_id": "logged_site"}, GET=EVERYONE),
    "transparency:consistency-proof": row({"site_id": "logged_site"}, GET=EVERYONE),
    # --- settings -----------------------------------------------------------------------------
    "settings:index": row(GET=MANAGERS),
    "settings:members": row(GET=MANAGERS),
    "settings:member-add": row(POST=MANAGERS),
    "settings:member-change": row({"membership_id": "member"}, POST=MANAGERS_OBJ),
    "settings:member-remove": row({"membership_id": "member"}, POST=MANAGERS_OBJ),
    "settings:member-token-revoke": row({"token_id": "member_token"}, POST=MANAGERS_OBJ),
    "settings:invite-resend": row({"invite_id": "invite"}, POST=MANAGERS_OBJ),
    "settings:invite-revoke": row({"invite_id": "invite"}, POST=MANAGERS_OBJ),
    "settings:agents": row(GET=MANAGERS),
    "settings:agent-key-add": row(POST=MANAGERS),
    "settings:agent-key-revoke": row({"key_pk": "key"}, POST=MANAGERS_OBJ),
    "settings:agent-deactivate": row({"agent_pk": "agent"}, POST=MANAGERS_OBJ),
    "settings:agent-reactivate": row({"agent_pk": "agent"}, POST=MANAGERS_OBJ),
    "settings:agent-token": row({"agent_pk": "agent"}, POST=MANAGERS_OBJ),
    "settings:agent-token-revoke": row({"token_pk": "agent_token"}, POST=MANAGERS_OBJ),
    "settings:agent-refunds": row({"agent_pk": "agent"}, POST=MANAGERS_OBJ),
    "settings:rails": row(GET=MANAGERS),
    "settings:rails-paypal": row(POST=MANAGERS),
    "settings:rails-woocommerce": row(POST=MANAGERS),
    "settings:rails-shopify": row(POST=MANAGERS),
    "settings:rails-stripe": row(POST=MANAGERS),
    "settings:rails-enabled": row({"rail": "rail"}, POST=MANAGERS),
    "settings:rails-test": row({"rail": "rail"}, POST=MANAGERS),
    "settings:account": row(GET=MEMBERS),
    "settings:account-logout": row(POST=MEMBERS),
    "settings:account-password": row(POST=MEMBERS),
    "settings:two-factor-setup": row(GET=MEMBERS, POST=MEMBERS),
    "settings:two-factor-confirm": row(POST=MEMBERS),
    "settings:two-factor-codes": row(POST=MEMBERS),
    "settings:two-factor-remove": row(POST=MEMBERS),
    "settings:two-factor-verify": row(GET=MEMBERS, POST=MEMBERS),
    # --- provider webhooks (the site's id in the path; the signature decides) -----------------
    "stripe-webhook": row({"site_id": "site"}, POST=SIGNED),
    "woocommerce-webhook": row({"site_id": "site"}, POST=SIGNED),
    "paypal-webhook": row({"site_id": "site"}, POST=SIGNED),
    "shopify-webhook": row({"site_id": "site"}, POST=SIGNED),
    # --- the API schema: a member's login when DEBUG is off -----------------------------------
    "api-schema": row(GET=API_MEMBERS),
    # --- the favicon: a redirect to the static SVG, for everyone ------------------------------
    "favicon": row(GET=EVERYONE),
}


# The changes an owner may make (an ``OK`` answer to a POST, PUT or DELETE above) that need no
# second factor on a site requiring one, and why. Every other such change is refused until
# the session has entered a code (tests/test_authorization_matrix.py sends each one as an
# owner without an authenticator): a new view that forgets the gate fails there, naming itself.
NO_SECOND_FACTOR: dict[str, str] = {
    "accounts:login": "signing in, where the code is asked",
    "accounts:switch_site": "choosing which of one's own sites to work on",
    "accounts:password-reset": "signed-out: asks for a reset email",
    "accounts:password-reset-confirm": "signed-out: the emailed link sets a password",
    "refunds:order-refund": "a staff refund, which staff with the permission make without one",
    "refunds:staff-refund-api": "a staff refund, which staff with the permission make without one",
    "audit:activity-verify": "a check that reads the log and changes nothing of the site",
    "settings:account-logout": "one's own sessions",
    "settings:account-password": "one's own password (the current one is asked)",
    "settings:two-factor-setup": "setting up the second factor itself",
    "settings:two-factor-confirm": "setting up the second factor itself (its code and the password)",
    "settings:two-factor-codes": "new recovery codes (a code is asked)",
    "settings:two-factor-remove": "removing the authenticator (a code is asked)",
    "settings:two-factor-verify": "entering the code",
}
