"""``_ports.free_port``: each xdist worker draws from its own slice, out of port 0's range."""

from __future__ import annotations

import socket

import pytest
from _ports import LOWEST, _ephemeral_low, free_port, worker_slice


def test_worker_slices_are_disjoint_and_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(worker_slice()))
    assert all(slices)
    assert not (slices[0] & slices[1]) and not (slices[1] & slices[2])
    assert not (slices[0] & slices[2])
    every = set().union(*slices)
    assert min(every) >= LOWEST and max(every) < _ephemeral_low()


def test_without_xdist_the_whole_range_is_one_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert worker_slice() == range(LOWEST, _ephemeral_low())


def test_a_free_port_is_in_the_slice_and_bindable() -> None:
    port = free_port()
    assert port in worker_slice()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing holds it


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    held = []
    try:
        for _ in range(20):
            port = free_port()
            assert port not in [s.getsockname()[1] for s in held]
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            held.append(sock)
    finally:
        for sock in held:
            sock.close()
