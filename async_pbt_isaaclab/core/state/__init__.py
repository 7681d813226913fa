"""The typed member state: what a member publishes (records, evidence), keeps (``MemberState``, its RNG) and
inherits (lineage, schedule), with their strict JSON forms. Pure data; reading and writing the files is
:mod:`async_pbt_isaaclab.core.workspace`'s."""
