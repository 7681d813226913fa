"""mjlab members: rsl_rl members on mjlab's tasks (Isaac Lab's manager API on MuJoCo-Warp), trained by mjlab's own
runner class.

``python -m async_pbt.mjlab.train TASK [mjlab's train flags] --pbt-workspace W --pbt-members N --pbt-index I``
(:mod:`.train`) is mjlab's ``train`` command with the population flags; :mod:`.glue` holds what it needs of mjlab
(the env seen as a gymnasium env, the runner, the env state a checkpoint keeps). The rsl_rl adapter
(:mod:`async_pbt_isaaclab.rsl_rl`) does the rest. Nothing here is imported unless the entry is run, and mjlab only
inside its functions: the package never imports mjlab unless asked (the ``[mjlab]`` extra installs it).
"""
