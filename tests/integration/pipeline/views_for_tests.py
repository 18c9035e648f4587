"""The bank view under topic names unique to one test (``SIQ_TEST_SUFFIX``).

Loaded by ``streamiq pipeline --views-module views_for_tests`` subprocesses so tests
sharing the session broker never see each other's topics.
"""

from __future__ import annotations

import dataclasses
import os

from streamiq.views import bank
from streamiq.views.base import App

__all__ = ["APP", "BALANCES", "TOPIC"]

SUFFIX = os.environ.get("SIQ_TEST_SUFFIX", "t")
TOPIC = f"bank-{SUFFIX}"
BALANCES = dataclasses.replace(bank.BALANCES, name=f"balances-{SUFFIX}", source_topics=(TOPIC,))
APP = App(name=f"bank-{SUFFIX}", topics=(TOPIC,), views=(BALANCES,))
