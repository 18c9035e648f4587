"""The serving tier: a node that materialises changelogs and answers queries on them.

Sub-packages by role, imports pointing down this list (docs/design.md, "The serving
tier at a glance"; tests/unit/test_import_graph.py checks it): ``main.py`` runs a node;
``http/`` is its HTTP edge (its own HTTP server, routes, the lean path, metrics, the
dashboard); ``sql/`` its PostgreSQL-wire edge; ``changes/`` streams what changed to
subscribers; ``peer/`` answers other nodes' requests of the peer protocol; ``query/``
runs typed queries for every front end; ``cluster/`` carries requests between nodes
(gate, placement, the peer protocol's client and frames); ``engines/`` answers queries
over one node's stores; ``node.py`` holds the node's parts; ``changelog/`` follows the
changelog topics into the stores; ``routes.py`` is the route table the HTTP edge and
the gate share.
"""
