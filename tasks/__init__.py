"""PBT task registrations (installed as async_pbt_isaaclab.tasks)."""
