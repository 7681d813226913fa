"""The workspace: its files and locks. The layout (``layout``), safe file I/O (``fsio``), the member and launcher
locks, checkpoint retention, the audit log and its verifier, the state and record files, and what the
filesystem must provide. Every side effect of the core lives here."""
