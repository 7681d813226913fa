"""One rl_games observer that calls several, in order.

rl_games takes a single ``algo_observer``; a member runs the PBT observer, the TensorBoard scalars observer and
rl_games' own statistics observer together through :class:`MultiObserver`.
"""

from __future__ import annotations

from typing import Any

from rl_games.common.algo_observer import AlgoObserver


class MultiObserver(AlgoObserver):
    """Calls several observers in order, including ``after_clear_stats`` (missing from the 1.6.5 base)."""

    def __init__(self, observers: list[AlgoObserver]):
        super().__init__()
        self.observers = list(observers)
        """The observers, called in this order."""

    def _call(self, name: str, *args: Any) -> None:
        for obs in self.observers:
            method = getattr(obs, name, None)
            if method is not None:
                method(*args)

    def before_init(self, base_name, config, experiment_name):
        self._call("before_init", base_name, config, experiment_name)

    def after_init(self, algo):
        self._call("after_init", algo)

    def process_infos(self, infos, done_indices):
        self._call("process_infos", infos, done_indices)

    def after_steps(self):
        self._call("after_steps")

    def after_clear_stats(self):
        self._call("after_clear_stats")

    def after_print_stats(self, frame, epoch_num, total_time):
        self._call("after_print_stats", frame, epoch_num, total_time)
