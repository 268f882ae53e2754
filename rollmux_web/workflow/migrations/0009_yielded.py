from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('workflow', '0008_moves'),
    ]

    operations = [
        migrations.AlterField(
            model_name='placement',
            name='end_reason',
            field=models.CharField(blank=True, choices=[('completed', 'completed'), ('cancelled', 'cancelled'), ('failed', 'a phase failed: the job was resubmitted'), ('node_down', 'a node went down: the job was resubmitted'), ('lost', 'its host was lost: the job was resubmitted'), ('profiled', 'its profiling run ended: queued with the measured phase times'), ('moved', 'moved to another co-execution group (resumed from its checkpoint)'), ('yielded', 'yielded its nodes to the members of its group its phases would slow past their SLO; queued to resume from its checkpoint')], help_text='empty while open', max_length=16),
        ),
    ]
