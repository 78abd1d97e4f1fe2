"""``python -m specrepro``: the command line, which lives in ``specrepro.run.commands``."""
import sys

from .run.commands import main

if __name__ == "__main__":
    sys.exit(main())
