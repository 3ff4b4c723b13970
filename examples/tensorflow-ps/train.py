"""A small Keras model trained with TensorFlow 2's ParameterServerStrategy on Runyard (or
SageMaker) with ``distribution={"parameter_server": {"enabled": True}}``.

The platform sets TF_CONFIG as SageMaker's TensorFlow container does and runs a ``ps``
task (a ``tf.distribute.Server``) on every instance; this script is the other task of its
instance. SageMaker names the first instance's task ``master``, TensorFlow 1's name for
the chief; TensorFlow 2's strategies only know ``chief``, so the script renames it before
reading TF_CONFIG. Then, as TensorFlow 2's parameter-server training goes:

- the chief (first instance) is the coordinator: it builds the model under the strategy,
  whose variables live on the ps tasks, and schedules training steps on the workers;
- every other instance is a worker: a ``tf.distribute.Server`` that runs what the chief
  sends, until the chief is done (TensorFlow's workers serve forever; this one ends when
  the chief's port closes, so the instance, and the job, can complete).

With one instance there is no TF_CONFIG (as on SageMaker) and the script trains alone.
The chief saves the model to SM_MODEL_DIR and fails the job if it misses --target-loss.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

# TensorFlow's C++ start-up notes (CPU features, oneDNN) say nothing about this job.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
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


def tf2_config() -> dict | None:
    """TF_CONFIG with SageMaker's ``master`` renamed to TensorFlow 2's ``chief``."""
    if "TF_CONFIG" not in os.environ:
        return None
    config = json.loads(os.environ["TF_CONFIG"])
    cluster = config["cluster"]
    if "master" in cluster:
        cluster["chief"] = cluster.pop("master")
    if config["task"]["type"] == "master":
        config["task"]["type"] = "chief"
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def serve_until_chief_is_done(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol="grpc",
        start=True,
    )
    print(f"{resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    host, port = resolver.cluster_spec().task_address("chief", 0).rsplit(":", 1)
    seen = False
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                seen = True
        except OSError:
            if seen:
                break
        time.sleep(0.5)
    print("the chief is done", flush=True)


def synthetic_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    # Every task draws the same data from the same seed.
    rng = np.random.default_rng(1234)
    inputs = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, args.classes)).astype("float32")
    return inputs, (inputs @ weights).argmax(axis=1).astype("int64")


def build(args: argparse.Namespace) -> tuple[tf.keras.Model, tf.keras.optimizers.Optimizer]:
    model = tf.keras.Sequential(
        [
            tf.keras.Input((args.features,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(args.classes),
        ]
    )
    return model, tf.keras.optimizers.SGD(args.lr, momentum=0.9)


def first_step_done(started: float) -> None:
    # The wall clock too, so that a benchmark can count from when the job was submitted.
    took = time.monotonic() - started
    print(f"first step done {took:.3f} s into training (unix time {time.time():.3f})", flush=True)


def train(args: argparse.Namespace, strategy: tf.distribute.Strategy) -> tf.keras.Model:
    inputs, labels = synthetic_data(args)
    with strategy.scope():
        model, optimizer = build(args)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def dataset_fn(_: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        data = tf.data.Dataset.from_tensor_slices((inputs, labels))
        return data.shuffle(len(inputs), seed=7).repeat().batch(args.batch_size).prefetch(2)

    @tf.function
    def step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    started = time.monotonic()
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
        coordinator.schedule(step, args=(iterator,)).fetch()
        first_step_done(started)
        timed = time.monotonic()
        for _ in range(args.steps - 1):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()
    else:
        iterator = iter(strategy.experimental_distribute_dataset(dataset_fn()))
        step(iterator)
        first_step_done(started)
        timed = time.monotonic()
        for _ in range(args.steps - 1):
            step(iterator)
    rate = (args.steps - 1) / (time.monotonic() - timed)
    print(f"steps/s {rate:.1f}", flush=True)
    loss = float(loss_fn(labels, model(inputs, training=False)))
    print(f"final loss {loss:.4f} (target {args.target_loss})", flush=True)
    if loss > args.target_loss:
        sys.exit(f"final loss {loss:.4f} missed the target {args.target_loss}")
    return model


def main() -> None:
    args = parse_args()
    config = tf2_config()
    if config is None:
        train(args, tf.distribute.get_strategy())
        return
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve_until_chief_is_done(resolver)
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    workers = len(config["cluster"]["worker"])
    print(f"chief: {workers} worker(s), {len(config['cluster']['ps'])} ps task(s)", flush=True)
    model = train(args, strategy)
    os.makedirs(args.model_dir, exist_ok=True)
    model.save(os.path.join(args.model_dir, "model.keras"))
    print(f"saved model to {args.model_dir}", flush=True)


if __name__ == "__main__":
    main()
