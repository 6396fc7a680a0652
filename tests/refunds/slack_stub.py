"""A loopback Slack Web API, answering in Slack's shapes (driven through slack_sdk's WebClient).

- ``GET|POST /api/users.info?user=U…`` with ``Authorization: Bearer <bot token>`` →
  ``{"ok": true, "user": {"id", "team_id", "name", "deleted", "is_bot", "is_restricted",
  "is_ultra_restricted", "is_email_confirmed", "profile": {"email", "real_name"}}}``; a user the workspace does not have → ``{"ok": false, "error":
  "user_not_found"}`` (users.info's documented error); another token →
  ``{"ok": false, "error": "invalid_auth"}`` (or ``token_error``: ``token_revoked``,
  ``account_inactive``, as Slack answers a revoked token or an uninstalled app's). Slack
  answers both with HTTP 200.
- A user added with ``email=None`` has no ``email`` in their profile, as Slack answers an app
  without the ``users:read.email`` scope. ``add_user``'s keywords override the user's flags:
  ``deleted=True`` (deactivated), ``is_restricted=True`` (a multi-channel guest),
  ``is_ultra_restricted=True`` (a single-channel guest; Slack sets both flags for one),
  ``is_email_confirmed=False`` (an email Slack has not confirmed), ``team_id="T…"`` (a user of
  another workspace) or ``team_id="E…"`` (an Enterprise Grid organisation's, as Slack
  answers an app installed across the organisation).

``calls`` records each ``(method, user)`` asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, urlsplit

from tests.rails.loopback import StubServer as LoopbackServer

TOKEN = "xoxb-1111111111-2222222222222-sillstubbottoken0000000"
TEAM = "T0SILLSTUB"


@dataclass
class SlackStub:
    url: str = ""  # the API base, ending /api/ as slack_sdk's base_url does
    token: str = TOKEN
    token_error: str = "invalid_auth"  # Slack's answer to any other token
    users: dict[str, str | None] = field(default_factory=dict)  # Slack user id → email
    flags: dict[str, dict[str, bool | str]] = field(default_factory=dict)  # user id → overrides
    calls: list[tuple[str, str]] = field(default_factory=list)

    def add_user(self, slack_user_id: str, email: str | None, **flags: bool | str) -> None:
        self.users[slack_user_id] = email
        self.flags[slack_user_id] = flags

    def users_info(self, *, token: str, user: str) -> dict[str, object]:
        self.calls.append(("users.info", user))
        if token != self.token:
            return {"ok": False, "error": self.token_error}
        if user not in self.users:
            return {"ok": False, "error": "user_not_found"}
        email = self.users[user]
        name = (email or user).split("@")[0]
        profile: dict[str, object] = {"real_name": name, "display_name": name}
        if email is not None:
            profile["email"] = email
        return {
            "ok": True,
            "user": {
                "id": user,
                "team_id": TEAM,
                "name": name,
                "deleted": False,
                "is_bot": False,
                "is_restricted": False,
                "is_ultra_restricted": False,
                "is_email_confirmed": True,
                "profile": profile,
            }
            | self.flags.get(user, {}),
        }


class _Handler(BaseHTTPRequestHandler):
    stub: SlackStub

    def do_GET(self) -> None:
        self._answer(dict(parse_qsl(urlsplit(self.path).query)))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        params = dict(parse_qsl(urlsplit(self.path).query))
        if self.headers.get("Content-Type", "").startswith("application/json"):
            params.update(json.loads(body or "{}"))
        else:
            params.update(parse_qsl(body))
        self._answer(params)

    def _answer(self, params: dict[str, str]) -> None:
        path = urlsplit(self.path).path
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        if path == "/api/users.info":
            status, answer = 200, self.stub.users_info(token=token, user=params.get("user", ""))
        else:
            status, answer = 404, {"ok": False, "error": "unknown_method"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class StubServer(LoopbackServer[SlackStub]):
    def __init__(self) -> None:
        super().__init__(SlackStub(), _Handler, path="/api/")
