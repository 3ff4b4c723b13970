"""A Horovod script, as SageMaker runs one when the job's hyperparameters enable MPI."""

import json

import horovod.torch as hvd

hvd.init()
print("horovod " + json.dumps({"rank": hvd.rank(), "size": hvd.size()}), flush=True)
