"""rsl_rl members: the adapter between rsl_rl's ``OnPolicyRunner`` (unforked) and the member loop (docs/rsl_rl.md)."""
