"""JobSloSummary.first_day / last_day (issue 25, pages at size): the SLO report finds the
summarised jobs that ran in its range on these indexed days, not among the range's phases.
Existing summaries get them from their `ran_days` ([first, last] ISO pairs, sorted)."""

from datetime import date

from django.db import migrations, models

BACKFILL_SQL = """
UPDATE workflow_jobslosummary
SET first_day = (ran_days -> 0 ->> 0)::date, last_day = (ran_days -> -1 ->> 1)::date
WHERE jsonb_array_length(ran_days) > 0
"""


def backfill(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKFILL_SQL)
        return
    summary = apps.get_model("workflow", "JobSloSummary")
    for s in summary.objects.exclude(ran_days=[]).iterator():
        s.first_day = date.fromisoformat(s.ran_days[0][0])
        s.last_day = date.fromisoformat(s.ran_days[-1][1])
        s.save(update_fields=["first_day", "last_day"])


class Migration(migrations.Migration):
    dependencies = [
        ("workflow", "0016_job_slo_summary"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobslosummary",
            name="first_day",
            field=models.DateField(db_index=True, null=True),
        ),
        migrations.AddField(
            model_name="jobslosummary",
            name="last_day",
            field=models.DateField(db_index=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
