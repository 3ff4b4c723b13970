"""An upload killed mid-copy, by a real process, as a full disk or a hard stop kills one."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

# Killed by SIGXFSZ once the copy passes the file size limit (1000 bytes).
KILLED_UPLOAD = """
import resource, signal, sys
from pathlib import Path
from contract import storage
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the kernel's default kills
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
storage.put_file(Path(sys.argv[1]), sys.argv[2])
"""


def kill_an_upload(source: Path, uri: str) -> None:
    """Start storing ``source`` (over 1000 bytes) at ``uri``; the process dies mid-copy."""
    upload = subprocess.run(
        [sys.executable, "-c", KILLED_UPLOAD, str(source), uri], capture_output=True, timeout=60
    )
    assert upload.returncode == -signal.SIGXFSZ, upload.stderr
