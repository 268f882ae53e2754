"""Job gauges read from the database when /metrics is scraped."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class JobCollector(Collector):
    """Report rollmux_jobs{status, tenant}: every tenant gets every status, zeros included,
    so a rate or alert over one status does not see the series vanish."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from rollmux_web.accounts.models import Tenant
        from rollmux_web.jobs.models import Job, JobStatus

        family = GaugeMetricFamily(
            "rollmux_jobs", "Jobs by status and tenant", labels=["status", "tenant"]
        )
        counts = {
            (row["status"], row["tenant__name"]): row["n"]
            for row in Job.objects.values("status", "tenant__name").annotate(n=Count("id"))
        }
        tenants = set(Tenant.objects.values_list("name", flat=True)) | {t for _, t in counts}
        for tenant in sorted(tenants):
            for status in JobStatus.values:
                family.add_metric([status, tenant], counts.get((status, tenant), 0))
        yield family
