"""The reason a retry gives for what it does stays short however many earlier tries there were."""

from __future__ import annotations

from airflow_provider_s3ch.core.recovery import EarlierTry, decide_resume

STEM = "0123456789abcdef0123"


def _qid(n: int) -> str:
    return f"s3ch-{STEM}-try{n}"


def _tries(count: int, state: str, *, start: int = 1) -> list[EarlierTry]:
    # The server lists them in no particular order; a distributed load logs one entry per node.
    tries = [EarlierTry(query_id=_qid(n), try_number=n, state=state) for n in range(start, start + count)]
    return list(reversed(tries)) + tries[:1]


def test_one_earlier_cleared_try_is_named() -> None:
    r = decide_resume(_tries(1, "finished"), 2, first_try=2)
    assert r.action == "load"
    assert (
        r.reason
        == f"no earlier try of this task instance ran a load (tries before 2 belong to a cleared run: {_qid(1)})"
    )


def test_two_earlier_cleared_tries_are_named_in_order() -> None:
    r = decide_resume(_tries(2, "finished"), 3, first_try=3)
    assert r.reason.endswith(f"(tries before 3 belong to a cleared run: {_qid(1)}, {_qid(2)})")


def test_twelve_earlier_cleared_tries_are_counted_with_the_first_and_latest() -> None:
    r = decide_resume(_tries(12, "finished"), 13, first_try=13)
    assert r.action == "load"
    assert r.reason.endswith(
        f"(tries before 13 belong to a cleared run: 12 queries, first {_qid(1)}, latest {_qid(12)})"
    )
    for n in range(2, 12):
        assert _qid(n) not in r.reason
    # try 10 sorts before try 2 as text: the summary goes by try number
    assert _qid(12) in r.reason and "try10" not in r.reason


def test_the_reason_stays_short_whatever_the_number_of_tries() -> None:
    lengths = {n: len(decide_resume(_tries(n, "finished"), n + 1, first_try=n + 1).reason) for n in (3, 12, 500)}
    assert lengths[500] - lengths[3] == 6  # only the numbers' digits grow: the count, the latest try, "tries before"
    assert lengths[500] < 200


def test_failed_tries_are_summarized_too() -> None:
    one = decide_resume(_tries(1, "failed"), 2)
    assert one.action == "load" and one.reason == f"the latest earlier try failed ({_qid(1)}): loading afresh"
    two = decide_resume(_tries(2, "failed"), 3)
    assert two.reason == f"the latest earlier try failed ({_qid(1)}, {_qid(2)}): loading afresh"
    twelve = decide_resume(_tries(12, "failed"), 13)
    assert twelve.reason == (
        f"the latest earlier try failed (12 queries, first {_qid(1)}, latest {_qid(12)}): loading afresh"
    )


def test_failed_tries_and_a_cleared_run_together() -> None:
    # tries 1-4 a cleared run, tries 5-16 failed in the current series
    tries = _tries(4, "finished") + _tries(12, "failed", start=5)
    r = decide_resume(tries, 17, first_try=5)
    assert r.reason == (
        f"the latest earlier try failed (12 queries, first {_qid(5)}, latest {_qid(16)}): loading afresh "
        f"(tries before 5 belong to a cleared run: 4 queries, first {_qid(1)}, latest {_qid(4)})"
    )


def test_running_tries_are_summarized_but_all_are_waited_for() -> None:
    one = decide_resume(_tries(1, "running"), 2)
    assert one.action == "wait" and one.query_ids == [_qid(1)]
    assert one.reason == f"an earlier try is still running: {_qid(1)}"
    three = decide_resume(_tries(3, "running"), 4)
    assert three.query_ids == sorted(_qid(n) for n in (1, 2, 3))
    assert three.reason == f"an earlier try is still running: 3 queries, first {_qid(1)}, latest {_qid(3)}"
