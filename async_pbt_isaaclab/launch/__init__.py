"""The launch layer: start and supervise a population's members (no torch).

The command line of every backend is :mod:`~async_pbt_isaaclab.launch.cli` (``async-pbt launch``, ``python -m
async_pbt_isaaclab.launch``); the backends are :mod:`~async_pbt_isaaclab.launch.local_backend` (processes on this
machine, kept running by :mod:`~async_pbt_isaaclab.launch.supervisor`), :mod:`~async_pbt_isaaclab.launch.slurm` and
:mod:`~async_pbt_isaaclab.launch.ray_backend`, with what they share in :mod:`~async_pbt_isaaclab.launch.backends`.
"""
