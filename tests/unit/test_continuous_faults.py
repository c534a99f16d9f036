"""The fault benchmark's plan and its insert figures (bench/continuous_faults.py), without servers."""

from __future__ import annotations

import random
from collections import Counter

from bench.continuous_faults import KINDS, insert_sizes, kill_plan


def test_the_kill_plan_spreads_the_kinds_evenly_at_seeded_points_inside_the_period() -> None:
    plan = kill_plan(24, 200.0, random.Random(43))
    assert Counter(kind for _, kind in plan) == dict.fromkeys(KINDS, 6)
    times = [t for t, _ in plan]
    assert times == sorted(times) and times[0] >= 10.0 and times[-1] <= 190.0
    assert plan == kill_plan(24, 200.0, random.Random(43))  # the seed makes it again
    assert plan != kill_plan(24, 200.0, random.Random(44))
    assert sorted(Counter(kind for _, kind in kill_plan(10, 50.0, random.Random(1))).values()) == [2, 2, 3, 3]


def test_insert_sizes_say_whether_each_insert_stayed_within_the_bound() -> None:
    assert insert_sizes([100, 100, 37], 100) == {"inserts": 3, "files_per_insert_max": 100,
                                                 "files_per_insert": [100, 100, 37], "bounded": True}  # fmt: skip
    assert insert_sizes([101], 100)["bounded"] is False
    assert insert_sizes([], 100) == {"inserts": 0, "files_per_insert_max": 0, "files_per_insert": [], "bounded": True}
