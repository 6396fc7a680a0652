"""The Django admin's app config, pointing it at Sill's own admin site (sill/admin.py)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class SillAdminConfig(AdminConfig):
    # Every ``@admin.register`` then lands on SillAdminSite: one class decides who may enter.
    default_site = "sill.admin.SillAdminSite"

    def ready(self) -> None:
        super().ready()  # autodiscovery: every app's admin module has registered its pages
        from django.contrib import admin

        from sill.admin_schedules import register_read_only

        register_read_only(admin.site)
