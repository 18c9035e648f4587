"""Between nodes: where a request is answered and how it gets there.

The ``Coordinator`` (``coordinator.py``) carries a request where ``placement.py``
decides, or splits it by partition; it is made of the authentication gate
(``gate.py``), the calls to peers (``peers.py``, over the peer protocol: the client in
``hop.py``, the frames in ``wire.py``; slow calls hedged by ``hedge.py``) and the
traffic counts (``traffic.py``). A request answered by a stream of frames has a
connection of its own: ``stream.py`` (a live subscription's events) and ``copy.py`` (a
partition's snapshot, ``bootstrap.py`` taking it in). Only this package connects to
peers. Nothing here computes an answer: that is ``engines/``
and ``query/`` (``Reads.decide`` for a key lookup).
"""

__all__: list[str] = []
