"""Training machinery (Chapters 5 and 8).

reference (single-process references a demo checks itself against), checkpoint (resumable
Booster checkpoints), signals (throughput, memory, communication wait), speed (the tuning knobs),
profiling (compute versus communication), share (the communication share of a step), faults
(deliberate failures), diagnose (a failed log -> cause and fix), labs (the failure labs).
"""
