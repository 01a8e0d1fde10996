"""GPU measurements with provenance under ``results/<hardware>/<name>.json``.

One command line records them all: ``python -m helpers.record <name> [--record] [flags]``
(:mod:`helpers.record.cli`; ``--list`` names the recorders). runner (one torchrun per run under a
time budget, the one record shape), results (the store), and one recorder per chapter: ch01, ch02 (4
and 8 GPUs), ch03, ch05, ch07, ch08, ch09, flagship (and flagship_levers), each beside the modules
that read its records back (ch03_calibration, ch07_tables, flagship_summary, ...).
"""
