"""Runnable CPU examples: one member (:mod:`~async_pbt_isaaclab.examples.cpu_member`) and a whole population
(:mod:`~async_pbt_isaaclab.examples.cpu_population`) of rl_games PPO on Pendulum-v1, no simulator needed."""
