"""views_for_tests' bank view as it was before transfers (issue 46): no ``to`` in its
input schema and no transfer checks, so its plan is the deposits-only one main ran
(``bank.legs`` folds a frame without ``to`` as it is). A checkpoint it makes is one
made before transfers, for the test that the transfer plan resumes it. Same names as
views_for_tests' (``SIQ_TEST_SUFFIX``), so the two share topics and checkpoints."""

from __future__ import annotations

import dataclasses
import os

from streamiq.views import bank
from streamiq.views.base import App

__all__ = ["APP", "BALANCES"]

SUFFIX = os.environ.get("SIQ_TEST_SUFFIX", "t")
BALANCES = dataclasses.replace(
    bank.BALANCES, name=f"balances-{SUFFIX}", source_topics=(f"bank-{SUFFIX}",),
    value_schema="account STRING, amount BIGINT, ts BIGINT",
    checks=tuple(c for c in bank.BALANCES.checks if c not in bank.TRANSFER_CHECKS))
APP = App(name=f"bank-{SUFFIX}", topics=BALANCES.source_topics, views=(BALANCES,))
