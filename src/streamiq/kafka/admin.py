"""Topic administration: create what a deployment needs, idempotently."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["delete_topics", "ensure_topics", "topic_names", "topic_partitions"]


def ensure_topics(conf: dict[str, Any], topics: dict[str, int], timeout: float = 15.0,
                  config: Mapping[str, str] | None = None) -> dict[str, int]:
    """Create missing topics (name -> partitions); return every topic's partition count.

    Existing topics are left alone; their real partition count is returned so callers
    partition with the count the cluster has, not the one they asked for. ``config``:
    topic settings for the topics created (e.g. ``retention.ms``).
    """
    admin = AdminClient(conf)
    existing = topic_partitions(admin, list(topics), timeout)
    # replication: the cluster's default.replication.factor (-1), so one broker gets 1
    # and a production cluster what its operators set (min.insync.replicas likewise)
    missing = [NewTopic(name, n, -1, config=dict(config or {}))
               for name, n in topics.items() if name not in existing]
    if missing:
        for name, fut in admin.create_topics(missing, operation_timeout=timeout).items():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"cannot create topic {name!r}: {exc}") from exc
        # the controller has created them; brokers learn of them a moment later
        deadline = time.monotonic() + timeout
        while True:
            existing = topic_partitions(admin, list(topics), timeout)
            if len(existing) == len(topics) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if len(existing) < len(topics):
            raise RuntimeError(f"topics {sorted(set(topics) - set(existing))} were created but "
                               f"no broker knows them after {timeout:g} s")
    return existing


def topic_partitions(admin: AdminClient | dict[str, Any], topics: list[str],
                     timeout: float = 10.0) -> dict[str, int]:
    """Partition counts of the topics that exist (absent topics are omitted)."""
    if isinstance(admin, dict):
        admin = AdminClient(admin)
    md = admin.list_topics(timeout=timeout)
    return {t: len(md.topics[t].partitions) for t in topics
            if t in md.topics and md.topics[t].error is None and md.topics[t].partitions}


def delete_topics(conf: dict[str, Any], topics: Iterable[str], timeout: float = 10.0) -> list[str]:
    """Delete topics; returns those deleted. One already gone is not an error."""
    names = list(topics)
    if not names:
        return []
    deleted = []
    admin = AdminClient(conf)  # kept referenced until every future is resolved
    for name, fut in admin.delete_topics(names, operation_timeout=timeout).items():
        try:
            fut.result(timeout)
            deleted.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise RuntimeError(f"cannot delete topic {name!r}: {exc}") from exc
    return deleted


def topic_names(conf: dict[str, Any], timeout: float = 10.0) -> list[str]:
    """Every topic of the cluster."""
    return list(AdminClient(conf).list_topics(timeout=timeout).topics)
