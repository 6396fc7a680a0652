"""Settings pages: members, agents and keys, rails (owners and admins); your account (everyone)."""

from sill.accounts import views_account, views_agents, views_members
from sill.rails import views as rail_views

app_name = "settings"
urlpatterns = [
    *views_members.urlpatterns,
    *views_agents.urlpatterns,
    *rail_views.urlpatterns,
    *views_account.urlpatterns,
]
