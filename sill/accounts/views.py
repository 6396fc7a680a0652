from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from sill.accounts.access import switch_site


class LoginView(auth_views.LoginView):
    """Django's login (it rotates the session key on login), with Sill's template."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True


@require_POST
def switch_site_view(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("accounts:login")
    site_id = request.POST.get("site", "")
    if not switch_site(request, site_id):
        messages.error(request, "You are not a member of that site.")
    nxt = request.POST.get("next", "/")
    if not url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        nxt = "/"
    # Object pages of the previous site would 404 on the new one: go to the list instead.
    if nxt.startswith("/orders/"):
        nxt = "/orders/"
    return HttpResponseRedirect(nxt)
