"""The decision: pure functions over plain dataclasses that the audit verifier replays.

Selection (``selection``, ``rules``), the explore strategies (``explore``, ``pb2``), mutation, the whole step
(``step``), the initial draw (``start``), the plan of a new generation and of an exploit (``generation``,
``exploit_plan``). Nothing here reads or writes a file, the clock or the environment
(``tests/test_import_boundary.py`` checks it): every input comes in as an argument, so a logged entry replays.
"""
