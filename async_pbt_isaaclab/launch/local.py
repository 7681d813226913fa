"""``python -m async_pbt_isaaclab.launch.local``: the launcher's command line under its former module name.

Kept because SLURM batch scripts written by earlier releases (a requeued task runs its script again) and the docs
of those releases run it; it is :mod:`async_pbt_isaaclab.launch.cli` under its old name in usage and error lines.
New commands use ``python -m async_pbt_isaaclab.launch``. The local backend is
:mod:`async_pbt_isaaclab.launch.local_backend`.
"""

import sys

from async_pbt_isaaclab.launch.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m async_pbt_isaaclab.launch.local"))
