"""member layer: one training process as a population member, with no rl_games or torch in it.

Claiming the member and choosing where it starts (:mod:`~async_pbt_isaaclab.member.session`), replacing the
process after an exploit (:mod:`~async_pbt_isaaclab.member.restart`) and its W&B run
(:mod:`~async_pbt_isaaclab.member.wandb_run`). It imports only the core; the rl_games layer builds on it.
"""
