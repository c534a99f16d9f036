"""The secret-bearing loggers stay raised while any block holds them, in whichever thread, and get their
level back when the last block ends: a load lists S3 in the task's thread while a second thread runs the
schema check's ``DESCRIBE`` (which carries the S3 keys)."""

from __future__ import annotations

import logging
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.hooks.quiet import SECRET_BEARING_LOGGERS, quiet_loggers


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def debug_root() -> _Records:
    root, records = logging.getLogger(), _Records()
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(records)
    yield records
    root.removeHandler(records)
    root.setLevel(level)


def test_a_block_ending_in_one_thread_leaves_the_other_threads_block_quiet(debug_root: _Records) -> None:
    driver = logging.getLogger("clickhouse_driver")
    listing_in, entered, first_done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def listing() -> None:  # the task's thread: every secret-bearing logger, ends first
        with quiet_loggers():
            listing_in.set()
            entered.wait(5)
        first_done.set()

    def describe() -> None:  # the read-ahead: the driver's logger, still running when the listing ends
        listing_in.wait(5)
        try:
            with quiet_loggers("clickhouse_driver"):
                entered.set()
                first_done.wait(5)
                driver.debug("DESCRIBE TABLE s3('…', 'key', 'the-secret')")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=listing), threading.Thread(target=describe)]
    threads[0].start()
    threads[1].start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert not any("the-secret" in line for line in debug_root.lines)
    assert driver.level == logging.NOTSET  # given back once both ended
    driver.debug("after the blocks")
    assert "after the blocks" in debug_root.lines


@given(order=st.permutations(range(4)), names=st.lists(st.sampled_from(SECRET_BEARING_LOGGERS[:3]), min_size=4,
                                                        max_size=4), start=st.sampled_from([logging.NOTSET,
                                                                                            logging.DEBUG]))
def test_any_order_of_ends_keeps_the_loggers_raised_until_the_last(order: list[int], names: list[str],
                                                                   start: int) -> None:
    loggers = {name: logging.getLogger(name) for name in SECRET_BEARING_LOGGERS[:3]}
    for logger in loggers.values():
        logger.setLevel(start)
    root_level = logging.getLogger().level
    logging.getLogger().setLevel(logging.DEBUG)
    try:
        blocks = [quiet_loggers(name) for name in names]
        for block in blocks:
            block.__enter__()
        open_blocks = set(range(len(blocks)))
        for index in order:
            blocks[index].__exit__(None, None, None)
            open_blocks.discard(index)
            for name, logger in loggers.items():
                held = any(names[i] == name for i in open_blocks)
                assert (logger.getEffectiveLevel() >= logging.INFO) if held else logger.level == start
    finally:
        logging.getLogger().setLevel(root_level)
        for logger in loggers.values():
            logger.setLevel(logging.NOTSET)
