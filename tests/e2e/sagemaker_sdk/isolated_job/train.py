"""What a script finds on an instance of a job with network isolation: its code, unpacked
from the channel the SDK shipped it in, and no way to the network."""

import json
import os
import socket

try:
    socket.gethostbyname("pypi.org")
    pypi = "resolved"
except OSError as error:
    pypi = type(error).__name__
report = {
    "host": os.environ["SM_CURRENT_HOST"],
    "cwd": os.getcwd(),
    "files": sorted(os.listdir(".")),
    "module_dir": os.environ["SM_MODULE_DIR"],
    "channels": json.loads(os.environ["SM_CHANNELS"]),
    "training": sorted(os.listdir(os.environ["SM_CHANNEL_TRAINING"])),
    "pypi": pypi,
}
print("isolated " + json.dumps(report), flush=True)
