"""The ``streamiq`` command: ``up`` (broker, ingest, pipeline and nodes on one machine,
supervised), each part on its own (``broker``, ``ingest``, ``pipeline``, ``node``),
``install``, and the commands that talk to a running cluster (``status``, ``query``,
``load``, ``token``).

``main.py`` parses the command line into one ``Settings`` (a flag wins over
``STREAMIQ_*``, which wins over a config file: ``configfile.py``) and runs the command;
``up.py`` and ``supervisor.py`` start and restart the parts of a local cluster.
"""
