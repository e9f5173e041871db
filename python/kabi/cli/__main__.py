"""``python -m kabi.cli``: the ``kabi`` command line."""

import sys

from ._main import main

sys.exit(main())
