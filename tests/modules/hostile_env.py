"""Hostile: reads the environment at import and fails with everything it saw in the message."""

import os
import sys

SEEN = {k: v for k, v in os.environ.items()}
print("ENVIRONMENT " + repr(SEEN), file=sys.stderr)
raise RuntimeError("environment seen by the module: " + repr(SEEN))
