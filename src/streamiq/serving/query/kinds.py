"""Every query type a node runs, registered: one import per module of a query type.

A query type is its typed query (a ``Query`` subclass with its ``kind``) and its runner
(``run.runs``). The built-in ones live in ``model.py`` and ``run.py``; a type in a module
of its own (``topk.py``) is registered by importing it here. The peer server imports
this module, so it reads and runs every type (``codec.decode``, ``Queries.run``) without
naming any.
"""

from streamiq.serving.query import run, topk
from streamiq.serving.query.model import KINDS

__all__ = ["KINDS", "run", "topk"]
