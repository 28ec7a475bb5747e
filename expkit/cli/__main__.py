"""``python -m expkit.cli``, as ``expkit`` (``python -m expkit`` does the same)."""

import sys

from .commands import main

sys.exit(main())
