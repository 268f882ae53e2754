"""Notifications: per user and per tenant, by email and by signed webhooks, on the domain's
events (rollmux_web/events.py): job placed, done, failed, resubmitted, drifting, SLO missed;
budget at 80% and 100%; node down. Deliveries are Celery tasks with retries and backoff,
and every attempt is in the delivery log on /notifications/."""
