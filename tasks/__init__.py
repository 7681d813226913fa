"""PBT task registrations (installed as ``async_pbt_isaaclab.tasks``).

Importing this package registers the ids of :data:`~async_pbt_isaaclab.tasks.registry.TASKS` with gymnasium, from
strings only: it imports neither Isaac Lab, Isaac Sim, omni, pxr nor torch, so it is safe before ``AppLauncher``.
Isaac Lab finds it through the ``isaaclab.tasks`` entry point group (``async_pbt = "async_pbt_isaaclab.tasks"``);
in a script, ``import async_pbt_isaaclab.tasks`` after launching the app, next to ``import isaaclab_tasks``.
"""

from async_pbt_isaaclab.tasks.registry import TASK_IDS, TASKS, register_tasks

register_tasks()

__all__ = ["TASKS", "TASK_IDS", "register_tasks"]
