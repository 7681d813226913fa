"""``python -m async_pbt_isaaclab.launch``: the launcher's command line (:mod:`async_pbt_isaaclab.launch.cli`)."""

import sys

from async_pbt_isaaclab.launch.cli import main

sys.exit(main())
