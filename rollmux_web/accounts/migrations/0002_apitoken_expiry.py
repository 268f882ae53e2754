from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def expire_existing(apps, schema_editor):
    """Give the tokens that exist today the configured lifetime, counted from now."""
    days = float(getattr(settings, "ROLLMUX_TOKEN_TTL_DAYS", 0) or 0)
    if days > 0:
        apps.get_model("accounts", "ApiToken").objects.filter(
            expires_at__isnull=True, revoked_at__isnull=True
        ).update(expires_at=timezone.now() + timedelta(days=days))


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="via_login",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(expire_existing, migrations.RunPython.noop),
    ]
