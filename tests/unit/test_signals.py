"""SIGTERM and Ctrl-C reach the main loop as a flag, even while it waits."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from streamiq._signals import StopFlag, stop_on_signals


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_wait_sets_the_flag(handlers: None, signum: int) -> None:
    flag = stop_on_signals()
    assert not flag.is_set()
    # delivered to this (the main) thread while it sits in wait(): the case that
    # deadlocked with threading.Event.set() in the handler
    threading.Timer(0.2, os.kill, (os.getpid(), signum)).start()
    assert flag.wait(30) is True and flag.is_set()


def test_wait_returns_false_when_nobody_sets_it() -> None:
    flag = StopFlag()
    assert flag.wait(0.05) is False
    flag.set()
    assert flag.wait(10) is True
