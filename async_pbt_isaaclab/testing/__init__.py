"""Helpers shared by the test suite and the reliability and benchmark scripts.

Nothing in the package imports this; it exists so that ``tests/`` and ``scripts/`` build the same real
objects (a trained rl_games agent, a member's command line) one way, and the test-only task they train on
without a simulator (``torch_reach_task``: Isaac Lab's step contract in pure torch).
"""
