"""``python -m eosclient.testing.nemesis``: the command line (``_cli``)."""

import sys

from eosclient.testing.nemesis._cli import main

if __name__ == "__main__":
    sys.exit(main())
