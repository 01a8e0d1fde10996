"""What a layout costs: bytes and seconds of communication, bytes of memory, FLOPs.

comm (the alpha-beta model, Chapter 3), memory (the textbook memory model, Chapter 7),
memory_llama (the measured-memory model of a Llama under a plugin, Chapter 7), census (what one
rank holds, measured), mfu (model FLOPs utilisation), planner (layouts ranked, Chapter 3).
"""
