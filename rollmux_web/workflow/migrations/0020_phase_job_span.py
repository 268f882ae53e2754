"""The phase records' job index becomes (job, started_at, finished_at). With 0019's
(job, started_at) PostgreSQL still probed a live job's phases through (job, iteration),
reading all of them, for the SLO report's "did it run in the range" (issue 25): the
estimates of the two were a hair apart. With the end in the index too the probe is read
from the index alone (an index-only scan), which the planner prefers; at a fleet's size a
month's probe of the 2,000 live jobs read ~108,000 buffers, now ~5,600. The new index is
built before the old one is dropped, so the foreign key always has one. Building it reads
the table once: ~15 s at 10 million rows here, during which phase records cannot be
written."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflow", "0019_phase_job_started"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="phaserecord",
            index=models.Index(fields=["job", "started_at", "finished_at"], name="phase_job_span"),
        ),
        migrations.RemoveIndex(model_name="phaserecord", name="phase_job_started"),
    ]
