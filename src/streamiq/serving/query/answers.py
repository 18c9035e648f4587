"""What a front end gets back from the query layer besides typed rows: where a
one-partition query was answered, in the front ends' one vocabulary.

A key lookup or a key's windows is answered here (``model.Read``, ``model.Windows``),
by a replica (``Relayed``: its reply, relayed as it came or read with ``codec.read`` /
``codec.windows``), or not here at all (``Redirect``: the client is sent to the owner;
``Refuse``: the error, 503 or 504). The lean path also meets the placement's ``Forward``
(the replica it asks itself) and a reply's ``PeerReply``. They are the cluster's types
(``serving/cluster/``), named here so that no front end reaches into the cluster
(``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

from streamiq.serving.cluster.coordinator import Relayed
from streamiq.serving.cluster.peers import PeerReply
from streamiq.serving.cluster.placement import Forward, Redirect, Refuse

__all__ = ["Forward", "One", "PeerReply", "Redirect", "Refuse", "Relayed"]

#: a one-partition answer from elsewhere, or none
One = Relayed | Redirect | Refuse
