"""Settings pages (owners and admins): members, agents and keys, rails."""

from sill.accounts import views_agents, views_members
from sill.rails import views as rail_views

app_name = "settings"
urlpatterns = [*views_members.urlpatterns, *views_agents.urlpatterns, *rail_views.urlpatterns]
