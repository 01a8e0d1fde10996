"""One torchrun entry module per demo; each reports through ``helpers.run.env.emit``.

Run any of them by hand with ``python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.NAME``
or, for one process, ``python -m helpers.demos.NAME``.
"""
