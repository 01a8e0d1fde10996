"""GPU measurements with provenance under ``results/<hardware>/<name>.json``.

runner (one torchrun per run under a time budget), results (the store), and one module per
record: ch01, ch02 (4 and 8 GPUs), ch03, ch05, ch07, ch08, ch09, flagship.
"""
