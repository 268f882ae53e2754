"""The what-if side-by-side table: a duration row reads in one unit (QA pass 14).

Each cell picked its own unit, so the makespans of one comparison read "2.16 h",
"112.5 min" and "110.9 min": the row is there to be compared at a glance.
"""

from __future__ import annotations

from rollmux_web.reports.whatif_present import compare, table


def test_a_duration_row_reads_in_one_unit() -> None:
    result = {
        "policies": {
            "rollmux": {"makespan_h": 2.16, "mean_queue_delay_s": 30.0},
            "solo-disagg": {"makespan_h": 1.875, "mean_queue_delay_s": 0.0},
            "colocated": {"makespan_h": 1.848, "mean_queue_delay_s": 150.0},
        }
    }
    rows = dict(table(compare(result)))
    assert rows["Makespan"] == ["2.16 h", "1.88 h", "1.85 h"]
    assert rows["Mean queue delay"] == ["0.5 min", "0.0 min", "2.5 min"]
