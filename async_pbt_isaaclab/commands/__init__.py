"""The ``async-pbt`` subcommands, grouped by what they look at; :mod:`async_pbt_isaaclab.cli` assembles them.

* :mod:`~async_pbt_isaaclab.commands.check_config`: ``check-config`` (an agent yaml's ``pbt:`` section);
* :mod:`~async_pbt_isaaclab.commands.workspace_views`: ``status``, ``audit``, ``best`` (a population workspace,
  read-only), :mod:`~async_pbt_isaaclab.commands.lineage_view`: ``lineage``;
  :mod:`~async_pbt_isaaclab.commands.status_view` renders the status table and ``--watch``;
* :mod:`~async_pbt_isaaclab.commands.report`: ``report`` (one HTML file; plots in
  :mod:`~async_pbt_isaaclab.commands.report_plots`, which needs matplotlib, data from
  :mod:`~async_pbt_isaaclab.commands.population_history`);
* :mod:`~async_pbt_isaaclab.commands.replay`: ``replay`` (the hyperparameter schedule of a member's lineage);
* :mod:`~async_pbt_isaaclab.commands.common`: :class:`~async_pbt_isaaclab.commands.common.CliError` and the
  formatting helpers they share; the exit codes are :mod:`async_pbt_isaaclab.exit_codes`.

``launch`` is registered from :mod:`async_pbt_isaaclab.launch.cli`. Like the CLI, these modules import only
the pure core (no torch, rl_games or Isaac Lab); matplotlib is imported only when ``report`` runs.
"""
