"""Between nodes: where a request is answered and how it gets there.

The ``Coordinator`` (``coordinator.py``) carries a request where ``placement.py``
decides, or splits it by partition; it is made of the authentication gate
(``gate.py``), the calls to peers (``peers.py``: one HTTP hop, or the lookup wire of
``hop.py`` and ``wire.py``) and the traffic counts (``traffic.py``). Nothing here
computes an answer: that is ``engines/`` (and ``http/answers.py`` for a key lookup).
"""

__all__: list[str] = []
