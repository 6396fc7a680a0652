"""Settings pages: members, agents and keys, rails (owners and admins); your account (everyone)."""

from sill.accounts import views_account, views_agents, views_members, views_two_factor
from sill.rails import views as rail_views

app_name = "settings"
urlpatterns = [
    *views_members.urlpatterns,
    *views_agents.urlpatterns,
    *rail_views.urlpatterns,
    *views_account.urlpatterns,
    *views_two_factor.urlpatterns,
]
