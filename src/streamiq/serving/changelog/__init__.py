"""Following the changelog: the threads that keep a node's stores and positions current.

The materializer restores and then follows each held changelog partition into its
store (``materializer.py``), checking the pipeline's markers (``markers.py``) that give
the input positions a partition reflects (position tokens, ``consistency.py``); the
view catalog (``discovery.py``) and the pipeline's progress topic (``progress.py``)
are followed the same way.
"""

__all__: list[str] = []
