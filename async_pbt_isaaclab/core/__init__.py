"""The population core: pure Python over plain data. Imports neither torch, rl_games nor Isaac Lab."""
