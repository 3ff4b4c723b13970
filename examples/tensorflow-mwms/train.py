"""A small Keras model trained with TensorFlow's MultiWorkerMirroredStrategy on Runyard (or
SageMaker) with ``distribution={"multi_worker_mirrored_strategy": {"enabled": True}}``.

Every instance is a ``worker`` in TF_CONFIG; each keeps a copy of the model and the
workers average their gradients at every step (synchronous, all-reduce), so all end with
the same weights: each prints a digest of its own, and the first (the chief) saves the
model to SM_MODEL_DIR. The job fails if the model misses --target-loss.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

# TensorFlow's C++ start-up notes (CPU features, oneDNN) say nothing about this job.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
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
    # Every worker draws the same data from the same seed; the strategy shards it.
    rng = np.random.default_rng(1234)
    inputs = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, args.classes)).astype("float32")
    return inputs, (inputs @ weights).argmax(axis=1).astype("int64")


def digest(model: tf.keras.Model) -> str:
    hasher = hashlib.sha256()
    for weight in model.get_weights():
        hasher.update(np.ascontiguousarray(weight).tobytes())
    return hasher.hexdigest()


def main() -> None:
    args = parse_args()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {"index": 0})
    workers = strategy.num_replicas_in_sync
    print(f"worker {task['index']} of {workers}", flush=True)

    inputs, labels = synthetic_data(args)
    global_batch = args.batch_size * workers
    data = tf.data.Dataset.from_tensor_slices((inputs, labels)).shuffle(len(inputs), seed=7)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = data.batch(global_batch, drop_remainder=True).with_options(options)
    batches = strategy.experimental_distribute_dataset(data)

    with strategy.scope():
        # Same seed everywhere; the strategy also makes the first values the chief's.
        tf.keras.utils.set_random_seed(42)
        model = tf.keras.Sequential(
            [
                tf.keras.Input((args.features,)),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(args.classes),
            ]
        )
        optimizer = tf.keras.optimizers.SGD(args.lr, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="sum_over_batch_size"
    )

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> None:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> None:
            with tf.GradientTape() as tape:
                # Each replica's mean over its part, weighed so the sum is the batch's mean.
                loss = loss_fn(y, model(x, training=True)) / workers
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        strategy.run(replica_step, args=(x, y))

    for epoch in range(args.epochs):
        for x, y in batches:
            step(x, y)
        # On the whole data set: the same figure on every worker, since the weights are.
        loss = float(loss_fn(labels, model(inputs, training=False)))
        print(f"worker {task['index']} epoch {epoch + 1} loss {loss:.4f}", flush=True)

    print(f"worker {task['index']} final loss {loss:.4f} (target {args.target_loss})", flush=True)
    print(f"worker {task['index']} weights sha256 {digest(model)}", flush=True)
    if task["index"] == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        model.save(os.path.join(args.model_dir, "model.keras"))
        print(f"saved model to {args.model_dir}", flush=True)
    if loss > args.target_loss:
        sys.exit(f"final loss {loss:.4f} missed the target {args.target_loss}")


if __name__ == "__main__":
    main()
