"""What routing needs of cluster membership: the ``Membership`` protocol and ``Member``.

``Router`` asks a membership who is live (``live()``: endpoint -> ``Member``, this node
always included) and which endpoint is this node's; the serving tier asks it to route
around a peer that refused a connection (``suspect``), starts and stops it with the
node, and reads how many records of the members topic it skipped. Two implementations:

- ``KafkaMembership`` (``routing/membership.py``): heartbeats through a topic per epoch,
  what every node runs;
- ``StaticMembership`` (``routing/memory.py``): members set by the caller, heartbeats
  and departures simulated by method calls, no Kafka (unit tests, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streamiq.kafka.skips import Skips
from streamiq.routing.heartbeats import Report

__all__ = ["Member", "Membership"]


@dataclass
class Member:
    """A live member as routing sees it: where it is reached, what it holds."""

    endpoint: str  # host:port peers reach it on
    incarnation: str  # new on every start
    seen: float  # when it was last heard from (the membership's monotonic clock)
    partitions: Report = field(default_factory=dict)
    started_at: float = 0.0


@runtime_checkable
class Membership(Protocol):
    """The live members of a cluster, as one node sees them."""

    @property
    def endpoint(self) -> str:
        """This node's endpoint (``host:port``)."""
        ...

    @property
    def skips(self) -> Skips:
        """Records of the members topic not used as heartbeats, per reason."""
        ...

    @property
    def skipped(self) -> int:
        """How many records ``skips`` counts in all."""
        ...

    @property
    def silenced(self) -> bool:
        """Stopped or silenced: this node no longer announces itself."""
        ...

    def live(self) -> dict[str, Member]:
        """endpoint -> member for every live member, always including this node."""
        ...

    def suspect(self, endpoint: str) -> None:
        """Route around ``endpoint`` (it refused a connection) until it is heard again."""
        ...

    def start(self) -> None:
        """Begin announcing this node and hearing the others (blocking: may create topics)."""
        ...

    def silence(self) -> None:
        """Stop announcing this node, without waiting (callable from any thread)."""
        ...

    def stop(self) -> None:
        """Stop announcing and hearing, and wait for that to be done."""
        ...
