"""Prints a loss per epoch, a little over a second apart, in the form the estimator's
metric definition reads (as a training script's progress lines do)."""

import time

LOSSES = (0.9, 0.5, 0.25)

time.sleep(1.1)  # the first value comes after the job's training start, as on SageMaker
for epoch, loss in enumerate(LOSSES, start=1):
    print(f"epoch={epoch} loss={loss}", flush=True)
    time.sleep(1.1)
