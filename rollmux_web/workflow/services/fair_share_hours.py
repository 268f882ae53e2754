"""Keep fair share's closed hours in the database (issue 25: a fresh process's first read).

`workflow.fairshare.usage_gpu_s` sums the usage window's closed hours once per process and
keeps them in memory; at a fleet's size the first read of a fresh web worker or controller
took the whole window (~3.4 million phase records, 40-110 s under load). The retention beat
runs `keep`: this process's closed hours (read as a page would, the stored ones reused) are
written to `FairShareHour` under their key (half-life and nodes), so another process reads
them and sums raw only the hours closed since, the window's first hour and the open ones.

- The same floats: a stored sum is the value the process summed, as its float64 bytes;
  a read decays it as a kept one.
- Idempotent: an hour stored already is not written again (one row per key and hour).
- Hours out of the window, and rows of another key (a changed half-life or node set), are
  deleted.
- As for the in-memory hours, an hour is closed CLOSED_AFTER past its end: a phase report
  later than that is not counted in a stored hour.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rollmux_web.workflow import fairshare
from rollmux_web.workflow.models import FairShareHour


def keep(now: datetime) -> int:
    """Store the usage window's closed hours not stored yet (returns how many); delete
    those out of the window or of another key."""
    fairshare.usage_gpu_s(now)
    key, hours = fairshare.closed_hours()
    stored = {
        int(h.timestamp())
        for h in FairShareHour.objects.filter(key=key).values_list("hour", flat=True)
    }
    rows = [
        FairShareHour(key=key, hour=datetime.fromtimestamp(t, UTC), tenants=pairs, sums=values)
        for t, sums in sorted(hours.items())
        if t not in stored
        for pairs, values in [fairshare.pack_sums(sums)]
    ]
    FairShareHour.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    FairShareHour.objects.exclude(key=key).delete()
    if hours:
        FairShareHour.objects.filter(hour__lt=datetime.fromtimestamp(min(hours), UTC)).delete()
    return len(rows)


__all__ = ["keep"]
