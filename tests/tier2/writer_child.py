"""Child process for the Tier-2 kill -9 test: writes one segment forever.

``python -m tests.tier2.writer_child ROOT`` appends ``stream_bytes()`` to segment
``s/0.#epoch.0`` in writes of varying size (chunks of 64 KiB, so it rolls often) and
prints the segment length after each acknowledged write, flushing every line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tidegate.tier2.filesystem import FileSystemStorage

NAME = "s/0.#epoch.0"


def stream_bytes(n: int) -> bytes:
    """The first ``n`` bytes of the segment's intended content."""
    block = bytes(range(251))  # a prime period, so misplaced bytes show
    return (block * (n // len(block) + 1))[:n]


def main(root: Path) -> None:
    st = FileSystemStorage(root, chunk_bytes_max=64 * 1024)
    if not st.exists(NAME):
        st.create(NAME)
    length = st.get_info(NAME).length
    content = stream_bytes(1 << 26)
    i = 0
    while True:
        size = (i * 7919) % 50000 + 1
        st.write(NAME, length, content[length : length + size])
        length += size
        sys.stdout.write(f"{length}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main(Path(sys.argv[1]))
