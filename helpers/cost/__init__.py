"""What a layout costs: bytes and seconds of communication, bytes of memory, FLOPs.

comm (the alpha-beta model, Chapter 3), calibration (that model fitted to measured collectives),
step_time (one layout's memory and step time, Chapter 3), planner (layouts ranked by it, Chapter 3),
memory (the textbook memory model, Chapter 7),
activations (Korthikanti's per-layer activations, Chapter 7), memory_llama (the one memory model:
a Llama- or GPT-style decoder under a plugin, checked against the GPU in Chapter 7), layer_bytes
(what autograd saves per layer, for it), memory_plan (its view for Chapter 3's planner, with
Megatron-LM's distributed optimizer), chunks (Gemini's chunks of that Llama), census (what one rank
holds, measured), mfu (model FLOPs utilisation). Chapter 12 (published trainings): hardware (the
clusters' presets), practice (context parallelism, FSDP gathers, interleaved stages and the shares
of a step that the step model lacks), moe (DeepSeek-V3's parameters, FLOPs and all-to-all).
web (the calculator page's one entry: a settings dict in, JSON out, run in the browser by Pyodide).
"""
