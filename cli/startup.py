"""What a CLI process skips at start-up: optional imports of our libraries that no command uses.

httpcore imports trio (and attrs) whenever trio is installed, to support trio's event loop; httpx
imports its own command line client (click, pygments, rich) whenever click is installed. Our commands
use neither, and together they were a fifth of `ajet-runner scan`'s start-up. Marking a module None
in sys.modules makes its import raise ImportError, the libraries' own "not installed" path. Only the
console scripts' main() does this, never an import: a test or a program that imports our CLI keeps
every library whole.
"""

from __future__ import annotations

import sys

SKIPPED = ("trio", "httpx._main")


def skip_unused_imports() -> None:
    for name in SKIPPED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
