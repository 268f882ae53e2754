"""Long-tail migration in the simulator (paper section 3; issue 14 item 4).

A rollout generates a batch of responses; it ends when its slowest response ends
(the drawn rollout duration T). Long before that most responses are done and most
rollout GPUs idle (the skewness bubble). The paper's scheduler watches the progress
and, once the rollout is tail-bound (e.g. 80% of its responses finished), moves the
unfinished responses onto a few of its workers and starts the next member's rollout
on the freed ones (H20 to H20 only): one job's tail runs beside the next one's head.

The model (decisions where the paper is silent are [I]):

1. [I] Response lengths, as a fraction of the slowest one, are log-normal with
   `length_sigma` (0.4: the last 20% of the responses then take about half the
   rollout, the order StreamRL and RollPacker report for RL rollouts), `responses` per
   rollout, drawn per (seed, job, iteration): the rollout is tail-bound at
   tau = T x (the `threshold` quantile of the lengths / their maximum), with decode
   time proportional to length.
2. The tail is consolidated onto `tail_share` of the rollout GPUs (the prototype's
   rule: migrate when the unfinished requests fit on the destination workers at
   full batch; 20% of the requests fit on 20% of the workers), which finish it at T.
3. [I] The freed GPUs run the next rollout on those nodes. In node time that is
   equivalent to the nodes being released at tau + tail_share x (T - tau) with the
   next rollout starting then at full width (rollout throughput linear in the GPUs:
   the workers are independent inference engines). The job's own training still
   waits for T: the engine holds its training nodes until then.
4. Only rollouts on rollout-pool nodes (H20 to H20) migrate, and only when another
   member of the group is pinned to one of their nodes (otherwise no one uses the
   freed GPUs). Admission is unchanged: it plans with worst-case durations, where
   every response is at its maximum length and there is no tail.
"""

from __future__ import annotations

import math
import zlib
from array import array
from dataclasses import dataclass

import numpy as np

from scheduler.model import JobProfile


@dataclass(frozen=True)
class LongTailModel:
    """The parameters of the long-tail migration model (module docstring)."""

    threshold: float = 0.8  # share of the responses done when the rollout is tail-bound
    tail_share: float = 0.2  # share of the rollout GPUs the tail is consolidated onto
    responses: int = 128
    length_sigma: float = 0.4

    def tail_start_fractions(self, job: JobProfile, seed: int) -> array[float]:
        """Return, per iteration, tau / T: when the rollout turns tail-bound.

        The lengths of iteration i are `rng.lognormal(0, sigma, responses)` (row i), and
        tau / T their `threshold` quantile (numpy's default, linear) over their maximum.
        Computed without the lognormal matrix: numpy draws a log-normal as
        exp(0 + sigma x z) of the standard normal z it would draw in its place, and exp
        keeps the order, so the order statistics the quantile and the maximum read are
        exp of the normals' (a partition of the normals finds them); math.exp is the C
        library's exp numpy calls. The same floats as `np.quantile(lengths, threshold,
        axis=1) / lengths.max(axis=1)` to the last bit (tests/scheduler/test_sim_longtail.py),
        at half the cost: it was 4% of the simulator at 2,100 jobs.
        """
        rng = np.random.default_rng([seed, zlib.crc32(job.id.encode("utf-8")), 7])
        n = self.responses
        if n < 2:  # one response: it is the slowest, tau = T
            return array("d", [1.0] * job.iterations)
        normals = rng.standard_normal(size=(job.iterations, n))
        # numpy's linear quantile: the virtual index (n - 1) q, between order statistics
        # lo and lo + 1 at weight gamma, interpolated as its `_lerp` does
        virtual = (n - 1) * self.threshold
        lo = min(math.floor(virtual), n - 2)
        gamma = virtual - lo
        # one partition at lo: the order statistic above it is the least of the rest,
        # the maximum their greatest (a partition at three places cost 4x as much)
        normals.partition(lo, axis=1)
        rest = normals[:, lo + 1 :]
        # exp of the three order statistics a row, by the C library's exp (numpy's own
        # vectorised exp differs from it in the last bit); the rest elementwise
        below, above, top = (
            np.fromiter(map(math.exp, (0.0 + self.length_sigma * col).tolist()), float)
            for col in (normals[:, lo], rest.min(axis=1), rest.max(axis=1))
        )
        step = above - below
        q = above - step * (1 - gamma) if gamma >= 0.5 else below + step * gamma
        # packed doubles, as the drawn durations (`records.draw_durations`): read at every
        # migrating rollout, and a list's float objects are cache misses at 2,000 jobs
        return array("d", (q / top).tobytes())

    def release_s(self, start_s: float, tail_start_s: float, end_s: float) -> float:
        """Return when the rollout's nodes are free for the next rollout (node time)."""
        tail = max(0.0, end_s - max(start_s, tail_start_s))
        return end_s - (1.0 - self.tail_share) * tail
