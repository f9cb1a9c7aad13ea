"""``python -m tidegate``: the same as the ``tidegate`` command."""

import sys

from tidegate.gateway.cli import main

sys.exit(main())
