"""Trace-driven, phase-level simulator of RollMux and its baselines (see run_simulation)."""

from scheduler.sim.run import run_simulation

__all__ = ["run_simulation"]
