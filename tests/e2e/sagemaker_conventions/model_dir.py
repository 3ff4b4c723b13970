"""A TensorFlow-style script that takes the SDK's --model_dir and uses it at once."""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", type=str)
parser.add_argument("--epochs", type=int, default=1)
args, _ = parser.parse_known_args()
local = not args.model_dir.startswith("s3://")
if local:
    with open(os.path.join(args.model_dir, "marker.txt"), "w") as out:
        out.write("saved\n")
names = ("MASTER_ADDR", "MASTER_PORT", "TF_CPP_MIN_LOG_LEVEL")
print(
    "model_dir "
    + json.dumps(
        {
            "model_dir": args.model_dir,
            "sm_model_dir": os.environ["SM_MODEL_DIR"],
            "env": {name: os.environ.get(name) for name in names},
        }
    ),
    flush=True,
)
