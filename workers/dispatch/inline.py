"""In-process dispatcher: each placement's JobHost lives in this process, phases on threads.

For tests that do not exercise Ray and as an embedded fallback. Residency is real (the
host keeps its runner between phases); placement on nodes is the controller's alone.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from rollmux_contract.phases import PhaseOrder, PhaseReport, Probe, ReportSink, host_name
from workers.dispatch.host import JobHost

log = logging.getLogger(__name__)


class InlineDispatcher:
    def __init__(self, *, on_report: ReportSink, max_workers: int = 16) -> None:
        self.on_report = on_report
        self.hosts: dict[str, JobHost] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rollmux-phase")

    def _host(self, order: PhaseOrder) -> JobHost:
        with self._lock:
            host = self.hosts.get(order.host_name)
            if host is None:
                host = JobHost(order.runner, order.context, order.checkpoint_dir)
                self.hosts[order.host_name] = host
            return host

    def dispatch(self, order: PhaseOrder) -> None:
        host = self._host(order)
        self._pool.submit(self._run, host, order)

    def _run(self, host: JobHost, order: PhaseOrder) -> None:
        try:
            result = host.run_phase(order.to_dict(), None)
            if result.get("outcome") == "duplicate":
                return
            self.on_report(PhaseReport.from_dict(result))
        except Exception:
            log.exception("phase %s: delivering its report failed", order.phase_id)

    def probe(self, order: PhaseOrder) -> Probe:
        with self._lock:
            host = self.hosts.get(order.host_name)
        if host is None:
            return Probe("dead")
        status = host.status(order.phase_id)
        report = PhaseReport.from_dict(status["report"]) if status["report"] else None
        return Probe(status["state"], report)

    def release(self, job_id: int, placement_id: int) -> None:
        with self._lock:
            self.hosts.pop(host_name(job_id, placement_id), None)

    kill = release

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
