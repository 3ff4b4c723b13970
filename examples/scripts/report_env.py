"""Prints what the script sees (arguments, hosts, channels) for tests and demos."""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args, unknown = parser.parse_known_args()
channel = os.environ.get("SM_CHANNEL_TRAIN")
report = {
    "host": os.environ["SM_CURRENT_HOST"],
    "hosts": json.loads(os.environ["SM_HOSTS"]),
    "epochs": args.epochs,
    "files": sorted(os.listdir(channel)) if channel else [],
}
print("seen " + json.dumps(report, sort_keys=True), flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "report.json"), "w") as handle:
    json.dump(report, handle)
