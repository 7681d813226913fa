"""rl_games layer."""
