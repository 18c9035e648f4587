"""Who owns which partition: members from heartbeats on the members topic
(``membership.py``, ``heartbeats.py``, ``epochs.py``; ``memory.py`` without Kafka, for
tests), an assignment that is a pure function of the live members (``assignment.py``),
and the ``Router`` that answers ``owner`` / ``replicas`` from it (``router.py``), all
behind the ``Membership`` protocol of ``base.py``.
"""
