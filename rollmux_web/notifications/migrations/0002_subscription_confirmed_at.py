from django.db import migrations, models


def confirm_existing(apps, schema_editor):
    # Subscriptions made before addresses were confirmed keep being delivered: their owners
    # have been receiving them; every new email address is confirmed first.
    Subscription = apps.get_model("notifications", "Subscription")
    Subscription.objects.filter(confirmed_at__isnull=True).update(
        confirmed_at=models.F("created_at")
    )


class Migration(migrations.Migration):
    dependencies = [("notifications", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="subscription",
            name="confirmed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(confirm_existing, migrations.RunPython.noop),
    ]
