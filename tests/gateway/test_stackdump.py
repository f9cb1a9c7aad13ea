"""``SIGUSR1`` on a running event loop writes every thread's and task's stack to stderr
(how a node whose container hangs starting is looked into, issue 26)."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import asyncio, os, signal
from tidegate.gateway.stackdump import install

async def stuck_in_recovery():
    await asyncio.Event().wait()

async def main():
    install(asyncio.get_running_loop())
    task = asyncio.create_task(stuck_in_recovery())
    await asyncio.sleep(0.1)
    os.kill(os.getpid(), signal.SIGUSR1)
    await asyncio.sleep(0.1)
    task.cancel()

asyncio.run(main())
"""


def test_sigusr1_dumps_threads_and_tasks() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    err = done.stderr.decode()
    assert "Current thread" in err and "asyncio tasks ---" in err
    assert "in stuck_in_recovery" in err
    assert "Exception in callback" not in err
