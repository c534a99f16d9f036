"""``free_port``: a loopback port that nothing listens on, drawn below the kernel's ephemeral range so that no
outgoing connection takes it before its server binds it. No servers."""

from __future__ import annotations

import socket

import pytest

from airflow_provider_s3ch.local import stack


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_port_below_the_ephemeral_range_that_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    low = stack._ephemeral_low()
    if low <= stack._LISTEN_PORTS_FROM + 1_000:  # a kernel whose range starts low, or none read: Linux's default
        low = 32_768
        monkeypatch.setattr(stack, "_ephemeral_low", lambda: low)
    ports = [stack.free_port() for _ in range(20)]
    assert all(stack._LISTEN_PORTS_FROM <= p < low for p in ports)
    assert all(_bindable(p) for p in ports)


def test_a_port_in_use_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        held.listen()
        # A range that starts at the busy port: the draw must pass over it.
        monkeypatch.setattr(stack, "_LISTEN_PORTS_FROM", busy)
        monkeypatch.setattr(stack, "_ephemeral_low", lambda: busy + 1_002)
        ports = {stack.free_port() for _ in range(30)}
    assert busy not in ports
    assert all(busy < p < busy + 1_002 for p in ports)


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "_ephemeral_low", lambda: 0)
    port = stack.free_port()
    assert port > 0 and _bindable(port)
