"""A TensorFlow parameter-server task, as SageMaker's TensorFlow container runs one on
every instance of a parameter_server job: a tf.distribute.Server for the ``ps`` task in
TF_CONFIG, on the CPU, serving until the instance's training process is done.

    python -m runtime.launch.tensorflow_ps     (with TF_CONFIG set)
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    # TensorFlow's C++ notes are not the job's: its start-up (CPU features, oneDNN) and,
    # while a TensorFlow 1 script trains, warnings about steps it cleans up after ("Local
    # rendezvous is aborting ... Cleanup"). Its errors still show; a level already set
    # wins (the job's own variables are its script's, not this helper's).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        sys.exit("parameter_server with framework tensorflow needs tensorflow installed")
    config = json.loads(os.environ["TF_CONFIG"])
    # Several TensorFlow processes on one GPU are not safe; the server needs none.
    no_gpu = tf.compat.v1.ConfigProto(device_count={"GPU": 0})
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name="ps",
        task_index=config["task"]["index"],
        config=no_gpu,
    )
    server.join()


if __name__ == "__main__":
    main()
