"""The peer protocol's server: a front end like ``http/`` and ``sql/``, for other nodes.

A connection that opens with the peer protocol's preface (``serving/cluster/wire.py``)
is served here: each request is read into a typed query (``serving/query/codec.py``),
run by the query layer as that peer's part, and its typed answer or error written back.
"""

__all__: list[str] = []
