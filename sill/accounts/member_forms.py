"""Input for Settings → Members: shape only; who may do what is decided in services."""

from __future__ import annotations

from django import forms

from sill.accounts.models import Role
from sill.errors import SillError

ROLE_HELP = {
    Role.OWNER: "Everything, including other owners.",
    Role.ADMIN: "Everything except managing owners.",
    Role.REVIEWER: "Sees orders and held refunds; cannot decide or refund.",
    Role.STAFF: "Sees orders; refunds only with “Can refund”.",
}


class _RoleFields(forms.Form):
    role = forms.ChoiceField(
        choices=Role.choices,
        error_messages={
            "required": "Choose a role.",
            "invalid_choice": "Choose one of: " + ", ".join(Role.labels).lower() + ".",
        },
    )
    can_refund = forms.BooleanField(required=False, label="Can refund")

    def add_refusal(self, error: SillError) -> None:
        """Show a service's refusal on the field it names, or above the form."""
        field = error.field if error.field in self.fields else None
        self.add_error(field, error.message)


class AddMemberForm(_RoleFields):
    field_order = ["email", "role", "can_refund"]

    email = forms.EmailField(
        max_length=150,
        error_messages={
            "required": "Enter the new member's email address.",
            "invalid": "Enter a valid email address, like name@example.com.",
        },
    )

    def clean_email(self) -> str:
        return self.cleaned_data["email"].strip().lower()


class ChangeMemberForm(_RoleFields):
    pass
