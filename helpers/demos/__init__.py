"""One torchrun entry module per demo; each reports through ``helpers.run.env.emit``.

A demo only puts pieces together: its flags (:mod:`helpers.run.cli`), the process group
(:func:`helpers.run.env.distributed`), calls into the library (``helpers.train``,
``helpers.parallel``, ``helpers.models``, ...) and ``emit``; nothing imports a demo. Run any of
them by hand with ``python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.NAME``
or, for one process, ``python -m helpers.demos.NAME``.
"""
