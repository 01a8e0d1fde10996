"""GPU measurements with provenance under ``results/<hardware>/<name>.json``.

One command line records them all: ``python -m helpers.record <name> [--record] [flags]``
(:mod:`helpers.record.cli`; ``--list`` names the recorders, every module here that registers a
``SPEC``). runner (one torchrun per run under a time budget, the one record shape, the parsers of
the demos a recorder replays), results (the store, and :func:`helpers.record.results.recorded`, the
newest record a chapter shows), commands (how a recording's command is spelled), one recorder per
chapter beside its run lists (``chNN.py``, ``flagship.py``, ``multinode.py`` for the hosts of
:mod:`helpers.cluster`) and the modules that read its records back (``ch07_tables``,
``flagship_summary``, ...), and gpu_suite (``make test-gpu`` and its record).
"""
