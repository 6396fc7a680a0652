"""Input of Settings → Agents. Format checks of ids and keys live in services.py."""

from __future__ import annotations

from django import forms

DATETIME_LOCAL = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


class AddKeyForm(forms.Form):
    agent_id = forms.CharField(label="Agent id", max_length=100)
    key_id = forms.CharField(label="Key id", max_length=100)
    public_key = forms.CharField(label="Public key", max_length=100)
    # datetime-local inputs carry no zone: Django reads them in the active zone, which
    # SiteTimeZoneMiddleware sets to the site's, as the page says beside each field.
    valid_from = forms.DateTimeField(label="Valid from", input_formats=DATETIME_LOCAL)
    valid_until = forms.DateTimeField(
        label="Valid until", input_formats=DATETIME_LOCAL, required=False
    )
