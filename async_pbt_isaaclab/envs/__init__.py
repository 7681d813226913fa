"""The env layer: completed episodes turned into evidence, on the env's device.

:mod:`~async_pbt_isaaclab.envs.summary_emitter` (the emitter, with :mod:`~async_pbt_isaaclab.envs.episode_layout`
and :mod:`~async_pbt_isaaclab.envs.settling_gate`), the contract every env layer meets
(:mod:`~async_pbt_isaaclab.member.summary_source`), the CPU fallback (:mod:`~async_pbt_isaaclab.envs.gym_vec_env`)
and the Isaac Lab layer (:mod:`async_pbt_isaaclab.envs.isaaclab`, the only place Isaac Lab is imported, lazily).
"""
