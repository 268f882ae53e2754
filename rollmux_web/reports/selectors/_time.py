"""Time helpers of the report selectors: report windows, exact seconds, epoch microseconds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.utils import timezone

MAX_RANGE_DAYS = 366
EPOCH_DT = datetime(1970, 1, 1, tzinfo=UTC)
MICRO = Decimal(1_000_000)


class ReportInputError(ValueError):
    """Bad report input (reversed or too long a range, a bad window): names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def now_or(now: datetime | None) -> datetime:
    """Return `now`, or the current time when it is None (callers pass `now` in tests)."""
    return now if now is not None else timezone.now()


def exact_seconds(td: timedelta) -> Decimal:
    """Return a timedelta as exact Decimal seconds (float seconds would lose cents)."""
    return Decimal(td.days * 86400 + td.seconds) + Decimal(td.microseconds) / Decimal(1_000_000)


def us(dt: datetime) -> int:
    """Return a datetime as integer microseconds since the epoch (exact)."""
    return (dt - EPOCH_DT) // timedelta(microseconds=1)


def day_range(start: date, end: date) -> tuple[datetime, datetime]:
    """Return [start 00:00 UTC, end+1 00:00 UTC) after checking the range; raise ReportInputError."""
    if end < start:
        raise ReportInputError("end", f"the end date {end} is before the start date {start}")
    days = (end - start).days + 1
    if days > MAX_RANGE_DAYS:
        raise ReportInputError(
            "end", f"the range is {days} days long; at most {MAX_RANGE_DAYS} days are allowed"
        )
    return (
        datetime.combine(start, time.min, tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
    )


def next_month(month: date) -> date:
    """Return the first day of the month after `month`'s."""
    return (month.replace(day=1) + timedelta(days=32)).replace(day=1)


def month_days(month_of: date) -> tuple[date, date, list[datetime]]:
    """Return the month's first day, the next month's first day and its day boundaries."""
    month_start = month_of.replace(day=1)
    next_month = (month_start + timedelta(days=32)).replace(day=1)
    t0 = datetime.combine(month_start, time.min, tzinfo=UTC)
    days = [t0 + timedelta(days=i) for i in range((next_month - month_start).days + 1)]
    return month_start, next_month, days


def parse_window(
    start: str | None,
    end: str | None,
    *,
    default: Callable[[], tuple[datetime, datetime]],
) -> tuple[datetime, datetime]:
    """Return the time window from query strings (ISO datetimes), or raise ReportInputError.

    `default` (the object's whole life) is only queried when a bound is missing.
    """
    fallback = default() if not (start and end) else None

    def parse(name: str, raw: str | None, otherwise: datetime) -> datetime:
        if not raw:
            return otherwise
        try:
            value = datetime.fromisoformat(raw.strip().replace(" ", "T").replace("Z", "+00:00"))
        except ValueError:
            raise ReportInputError(
                name, f"{raw!r} is not a date and time (use YYYY-MM-DDTHH:MM[:SS])"
            ) from None
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    t0 = parse("start", start, fallback[0] if fallback else EPOCH_DT)
    t1 = parse("end", end, fallback[1] if fallback else EPOCH_DT)
    if t1 <= t0:
        raise ReportInputError("end", "the window ends before it starts")
    if (t1 - t0).days > MAX_RANGE_DAYS:
        raise ReportInputError("end", f"the window is longer than {MAX_RANGE_DAYS} days")
    return t0, t1
