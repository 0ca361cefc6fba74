"""``python -m eosclient.testing.cluster_nemesis``: the command line (``_cli``)."""

import sys

from eosclient.testing.cluster_nemesis._cli import main

if __name__ == "__main__":
    sys.exit(main())
