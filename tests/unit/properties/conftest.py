"""Hypothesis settings of the parser properties: bounded, no deadline, no example files.

``database=None``: nothing is written into the tree (a failing example is printed, with
the ``@reproduce_failure`` blob, instead of being saved under ``.hypothesis/``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "streamiq-properties", max_examples=200, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("streamiq-properties")
