"""Health endpoints for load balancers, docker-compose and Kubernetes probes.

`/healthz`: the process is up and answers (liveness: nothing else is checked, so a database
outage never gets a healthy web process restarted). `/readyz`: the database, the Celery
broker and Ray are reachable (readiness), with which one failed. Both are answered by
`HealthMiddleware`, first in the middleware list, so a probe needs no allowed Host header
(kubelet sends the pod IP), no HTTPS redirect and no session.
"""
