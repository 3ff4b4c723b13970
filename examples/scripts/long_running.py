"""Runs until stopped, saving on SIGTERM as a well-behaved training script does.

Prints its pid and its child's pid so a test can check that nothing survives a stop."""

import os
import signal
import subprocess
import sys
import time


def save_and_exit(*_: object) -> None:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "checkpoint.txt"), "w") as handle:
        handle.write("saved on SIGTERM\n")
    print("saved on SIGTERM", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, save_and_exit)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
print(f"pids {os.getpid()} {child.pid}", flush=True)
for tick in range(3600):
    print(f"tick {tick}", flush=True)
    time.sleep(1)
