from django.urls import path

from policies import api, views

app_name = "policies"
urlpatterns = [
    path("rules/", views.rules, name="rules"),
    path("rules/auto-refund/", views.auto_refund, name="auto-refund"),
    path("rules/protect/", views.protect_add, name="protect-add"),
    path("rules/window/", views.refund_window, name="refund-window"),
    path("rules/versions/<int:number>/restore/", views.version_restore, name="version-restore"),
    path("rules/templates/", views.templates, name="templates"),
    path("rules/templates/<str:item_id>/", views.template_preview, name="template-preview"),
    path("rules/templates/<str:item_id>/apply/", views.template_apply, name="template-apply"),
    path("rules/<str:rule_id>/mode/", views.rule_mode, name="rule-mode"),
    path("rules/<str:rule_id>/delete/", views.rule_delete, name="rule-delete"),
    path("api/v1/policy-templates", api.PolicyTemplateListApi.as_view(), name="api-templates"),
    path(
        "api/v1/sites/<str:site_id>/rules/from-template",
        api.RulesFromTemplateApi.as_view(),
        name="api-from-template",
    ),
    path("api/v1/sites/<str:site_id>/rules", api.RulesApi.as_view(), name="api-rules"),
    # After from-template: a rule id never shadows it.
    path(
        "api/v1/sites/<str:site_id>/rules/<str:rule_id>",
        api.RuleDeleteApi.as_view(),
        name="api-rule",
    ),
]
