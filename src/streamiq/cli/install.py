"""``streamiq install``: everything a part needs that pip does not bring, resolved once.

Apache Kafka's jars and the broker's class-data archive (``kafka/install.py``) and
Spark's Kafka connector (``pipeline/connector.py``), each by the Ivy inside PySpark from
Maven Central (Python and Java are all a user needs). Each is skipped when already
there, so running it again is quick; ``streamiq up`` runs it itself when something is
missing. Nothing is fetched at run time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from streamiq.config import Settings

__all__ = ["ensure_installed", "missing", "run_install"]


def missing(broker: bool = True) -> list[str]:
    """What is not installed yet: ``broker`` (its jars), ``connector``."""
    from streamiq.kafka.jars import installed
    from streamiq.pipeline.connector import connector_jars

    out = ["broker"] if broker and not installed() else []
    return out + ([] if connector_jars() else ["connector"])


def ensure_installed(say: Callable[[str], None], broker: bool = True) -> None:
    """Install what is missing (``broker``: the embedded broker's jars too), one line
    each; JarsError when something cannot be resolved."""
    from streamiq.kafka.install import install as install_broker
    from streamiq.pipeline.connector import CONNECTOR_VERSION, install_connector

    todo = missing(broker)
    if "broker" in todo:
        say("installing Apache Kafka's jars (once; Ivy, from Maven Central) ...")
        libs, jsa = install_broker()
        say(f"Apache Kafka's jars are in {libs}" + (
            f"; the broker's class-data archive is {jsa}" if jsa else
            " (no class-data archive: the broker starts without one)"))
    if "connector" in todo:
        say(f"installing Spark's Kafka connector {CONNECTOR_VERSION} (once; Ivy, from "
            "Maven Central) ...")
        say(f"Spark's Kafka connector is in {install_connector()}")


def run_install(settings: Settings) -> None:
    """Install what is missing, or say that everything is there; exit 2 naming what
    could not be resolved."""
    from streamiq.kafka.jars import JarsError, kafka_libs
    from streamiq.pipeline.connector import connector_libs

    del settings  # the install folders come from the environment (STREAMIQ_*_LIBS)

    def say(line: str) -> None:
        print(f"streamiq: {line}", flush=True)

    try:
        ensure_installed(say)
    except JarsError as exc:
        print(f"streamiq: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    say(f"installed: Apache Kafka's jars in {kafka_libs()}, Spark's Kafka connector in "
        f"{connector_libs()}")
