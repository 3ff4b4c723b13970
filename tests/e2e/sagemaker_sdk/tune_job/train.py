"""A trial of a tuning job: its loss depends on the hyperparameter ``shift`` it is given
(lowest at shift = 0.3), printed in the form the tuner's metric definition reads."""

import argparse
import time

parser = argparse.ArgumentParser()
parser.add_argument("--shift", type=float, required=True)
parser.add_argument("--epochs", type=int, default=1)
# Seconds between epochs: a slow trial is one a tuner can stop before it ends.
parser.add_argument("--sleep", type=float, default=0.0)
# Strict, as many scripts are: the SDK's sagemaker_* parameters and the tuning
# objective's name that every trial gets are no arguments of the script's.
arguments = parser.parse_args()
for epoch in range(1, arguments.epochs + 1):
    loss = (arguments.shift - 0.3) ** 2 + 0.1 / epoch
    print(f"epoch={epoch} shift={arguments.shift} loss={loss:.6f}", flush=True)
    time.sleep(arguments.sleep)
