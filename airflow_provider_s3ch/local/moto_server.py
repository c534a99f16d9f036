"""moto's S3/SQS server as the local stack runs it: ``python -m airflow_provider_s3ch.local.moto_server -H … -p …``.

moto's SQS asks each message whether it is visible and whether it is delayed by turning the clock into
milliseconds through a UTC datetime (``moto.core.utils.unix_time_millis``, ~10 µs), and asks it of every
message in the queue on each send (the queue's attributes: its approximate counts), receive and delete.
With thousands of S3 event notifications waiting, every put that notifies the queue then cost a third of a
second of the server's one Python process, and puts slowed down as the queue grew (500 puts took 4.4 s, then
8.9, 13.2, 17.5 s). Here the two checks compare the same timestamps against ``time.time()`` (the same
milliseconds since the epoch, ~0.1 µs): every answer stays the same, the server's work per message drops a
hundredfold. Nothing else of moto changes.
"""

from __future__ import annotations

import time


def _now_ms() -> float:
    return time.time() * 1000


def patch_sqs_clock() -> None:
    """Give moto's SQS messages their visibility and delay checks on ``time.time()``."""
    from moto.sqs.models import Message

    Message.visible = property(lambda self: _now_ms() > self.visible_at)  # type: ignore[method-assign,assignment]
    Message.delayed = property(lambda self: _now_ms() < self.delayed_until)  # type: ignore[method-assign,assignment]


def main() -> None:  # pragma: no cover - runs as the stack's S3 server process
    patch_sqs_clock()
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":  # pragma: no cover
    main()
