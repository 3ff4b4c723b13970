"""Asynchronous parameter-server training written as the SageMaker TensorFlow script-mode
article has it: the script only reads TF_CONFIG and SM_* (nothing of Runyard), and every
instance trains.

With ``distribution={"parameter_server": {"enabled": True}}`` the platform runs a ``ps``
task on every instance and this script beside it, as the ``master`` (first instance) or a
``worker``. It builds its graph TensorFlow 1's way (between-graph replication through
``tf.compat.v1``): variables on the ps tasks, each task's steps on its own instance, and
each task applies its gradients when it has them, without waiting for the others. The
master initialises the variables, waits for the workers to finish, checks the loss on
the whole data set and saves a checkpoint to SM_MODEL_DIR; the job fails if the loss
misses --target-loss.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# TensorFlow's C++ start-up notes (CPU features, oneDNN) say nothing about this job.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400, help="across all tasks")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--target-loss", type=float, default=0.2)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    # What the SageMaker SDK passes every TensorFlow job (and Runyard one submitted without
    # it): an S3 prefix on SageMaker, for scripts that save there themselves. This one
    # saves to the instance's model directory, which is uploaded.
    parser.add_argument("--model_dir", dest="sdk_model_dir")
    return parser.parse_args()


def synthetic_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1234)
    inputs = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, args.classes)).astype("float32")
    return inputs, (inputs @ weights).argmax(axis=1).astype("int64")


def main() -> None:
    args = parse_args()
    v1.disable_eager_execution()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], tf_config["task"]["index"]
    is_master = job == "master"
    workers = len(tf_config["cluster"].get("worker", []))
    host = os.environ.get("SM_CURRENT_HOST", "?")
    print(f"{job} {index} on {host}: {workers} worker(s) beside the master", flush=True)

    server = tf.distribute.Server(cluster, job_name=job, task_index=index)
    device = v1.train.replica_device_setter(
        worker_device=f"/job:{job}/task:{index}", cluster=cluster
    )
    with v1.device(device):
        global_step = v1.train.get_or_create_global_step()
        x = v1.placeholder(tf.float32, [None, args.features])
        y = v1.placeholder(tf.int64, [None])
        init = v1.glorot_uniform_initializer(seed=42)
        w1 = v1.get_variable("w1", [args.features, 64], initializer=init)
        b1 = v1.get_variable("b1", [64], initializer=v1.zeros_initializer())
        w2 = v1.get_variable("w2", [64, args.classes], initializer=init)
        b2 = v1.get_variable("b2", [args.classes], initializer=v1.zeros_initializer())
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )
        optimizer = v1.train.MomentumOptimizer(args.lr, momentum=0.9)
        train_op = optimizer.minimize(loss, global_step=global_step)
        # How many workers are done: the master waits for them before it ends (and with it,
        # as on SageMaker, the parameter servers the workers still use).
        finished = v1.get_variable(
            "workers_finished", [], tf.int32, v1.zeros_initializer(), trainable=False
        )
        finish = v1.assign_add(finished, 1)

    manager = v1.train.SessionManager(
        ready_op=v1.report_uninitialized_variables(), recovery_wait_secs=0.5
    )
    session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:{job}/task:{index}"])
    if is_master:
        session = manager.prepare_session(
            server.target, init_op=v1.global_variables_initializer(), config=session_config
        )
    else:
        session = manager.wait_for_session(server.target, config=session_config)

    inputs, labels = synthetic_data(args)
    rng = np.random.default_rng(index + (0 if is_master else 1000))
    mine = steps = 0
    while steps < args.steps:
        batch = rng.integers(0, len(inputs), args.batch_size)
        _, steps = session.run([train_op, global_step], {x: inputs[batch], y: labels[batch]})
        mine += 1
    print(f"{job} {index} took {mine} of {steps} steps", flush=True)

    if not is_master:
        session.run(finish)
        return
    while session.run(finished) < workers:
        time.sleep(0.2)
    final = session.run(loss, {x: inputs, y: labels})
    print(f"final loss {final:.4f} (target {args.target_loss})", flush=True)
    os.makedirs(args.model_dir, exist_ok=True)
    v1.train.Saver([w1, b1, w2, b2]).save(session, os.path.join(args.model_dir, "model.ckpt"))
    print(f"saved model to {args.model_dir}", flush=True)
    if final > args.target_loss:
        sys.exit(f"final loss {final:.4f} missed the target {args.target_loss}")


if __name__ == "__main__":
    main()
