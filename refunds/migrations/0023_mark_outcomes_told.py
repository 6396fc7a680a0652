from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Coalesce, Now


def mark_told(apps, schema_editor):
    """Refunds that failed, failed after settlement or settled before Sill recorded telling
    anyone of it are marked told: the old code sent their emails (claimed in the cache) or
    logged that it could not, and the sweep of missed emails (refunds.notify_missed_outcomes)
    must not email every past failure, nor every buyer ever refunded, on the first minute
    after the deploy. Each is marked with the time of its outcome, as near as the row says."""
    Refund = apps.get_model("refunds", "Refund")
    Refund.objects.filter(
        status="failed", reversed_at__isnull=True, failure_notified_at__isnull=True
    ).update(failure_notified_at=F("updated_at"))
    Refund.objects.filter(reversed_at__isnull=False, reversal_notified_at__isnull=True).update(
        reversal_notified_at=F("reversed_at")
    )
    Refund.objects.filter(status="succeeded", confirmation_sent_at__isnull=True).update(
        confirmation_sent_at=Coalesce(F("settled_at"), Now())
    )


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0022_outcome_notified_at"),
    ]

    # The partial indexes of what is untold are built after the marking, so that they hold a
    # minute's worth of refunds, not every refund there ever was. Undone, the marking has
    # nothing to do: undoing 0022 drops the columns.
    operations = [
        migrations.RunPython(mark_told, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="refund",
            index=models.Index(
                condition=models.Q(
                    ("failure_notified_at__isnull", True),
                    ("reversed_at__isnull", True),
                    ("status", "failed"),
                ),
                fields=["created_at"],
                name="refund_failure_untold_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="refund",
            index=models.Index(
                condition=models.Q(
                    ("reversal_notified_at__isnull", True), ("reversed_at__isnull", False)
                ),
                fields=["reversed_at"],
                name="refund_reversal_untold_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="refund",
            index=models.Index(
                condition=models.Q(("confirmation_sent_at__isnull", True), ("status", "succeeded")),
                fields=["settled_at"],
                name="refund_confirmation_unsent_idx",
            ),
        ),
    ]
