"""member layer: a population member's life for any trainer, with no rl_games or torch in it.

The member loop (:mod:`~async_pbt_isaaclab.member.loop`: the trainer's events in, effects out), its executor
(:mod:`~async_pbt_isaaclab.member.executor`: every file, audit entry, state save and trainer call), what it
publishes (:mod:`~async_pbt_isaaclab.member.publication`, :mod:`~async_pbt_isaaclab.member.publishing`), where a
donor comes from (:mod:`~async_pbt_isaaclab.member.donors`), the trainer protocol a trainer adapter implements
(:mod:`~async_pbt_isaaclab.member.trainer`), claiming the member and choosing where it starts
(:mod:`~async_pbt_isaaclab.member.session`; what a killed process left, :mod:`~async_pbt_isaaclab.member.recovery`),
replacing the process after an exploit (:mod:`~async_pbt_isaaclab.member.restart`) and its W&B run
(:mod:`~async_pbt_isaaclab.member.wandb_run`). It imports only the core; the trainer layers (rl_games/) build on it.
"""
