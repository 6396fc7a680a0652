"""Sill's overrides of Django's own management commands (``manage.py changepassword``).

Listed in ``INSTALLED_APPS`` before ``django.contrib.auth``: Django runs the command of the
first app that has one, so an operator's ``changepassword`` is Sill's, which signs what it
changed as every other way of setting a password does (``sill.accounts.admin_audit``).
"""
