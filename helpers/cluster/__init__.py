"""Several hosts on one machine, and the multi-node runs of Chapters 5 and 8 on them.

hosts (network namespaces joined by a bridge, a link shaped with tc), multinode (one job over those
hosts, a torchrun agent each; Chapter 5, "Launching with torchrun"), ssh (``colossalai run
--hostfile`` over SSH), slurm (a two-node SLURM cluster), node_faults (a host dies or its link goes
down, Chapter 8), mesh_orders and node_egress (the cost model's mesh orders and a ring leaving a
node once, measured on a slower link), runs (the table of these runs and whether this machine can
make them). The recorder that keeps them for machines that cannot is
:mod:`helpers.record.multinode`.
"""
