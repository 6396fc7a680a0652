from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from refunds.demo import DEMO_USERS, load_demo


class Command(BaseCommand):
    help = "Load the demo site, users, agent and orders (idempotent) and print the logins."

    def handle(self, *args: Any, **opts: Any) -> None:
        result = load_demo()
        self.stdout.write(self.style.SUCCESS(f"Demo site {result.site.id} ({result.site.name})"))
        self.stdout.write("Log in at /login/ with:")
        for (email, password), (_, role, _) in zip(result.logins, DEMO_USERS, strict=True):
            self.stdout.write(f"  {role:<9} {email:<36} {password}")
        self.stdout.write(f"Demo agent private key: {result.key_file}")
