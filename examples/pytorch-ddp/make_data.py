"""Writes a small synthetic classification data set as CSV files, for the examples.

    python examples/pytorch-ddp/make_data.py data    # data/part-0.csv ... data/part-3.csv

Each row is ``--features`` numbers and then a label: the class whose score under a random
linear map (plus a little noise) is highest, so a small network learns it in a few epochs.
Only the standard library: it runs wherever the CLI does.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--files", type=int, default=4)
    args = parser.parse_args()

    rng = random.Random(1234)
    weights = [[rng.gauss(0, 1) for _ in range(args.classes)] for _ in range(args.features)]
    args.directory.mkdir(parents=True, exist_ok=True)
    handles = [
        (args.directory / f"part-{index}.csv").open("w", newline="") for index in range(args.files)
    ]
    writers = [csv.writer(handle) for handle in handles]
    for sample in range(args.samples):
        features = [rng.gauss(0, 1) for _ in range(args.features)]
        scores = [
            sum(x * w[label] for x, w in zip(features, weights, strict=True)) + rng.gauss(0, 0.1)
            for label in range(args.classes)
        ]
        label = max(range(args.classes), key=scores.__getitem__)
        writers[sample % args.files].writerow([f"{x:.4f}" for x in features] + [label])
    for handle in handles:
        handle.close()
    print(f"wrote {args.samples} samples in {args.files} files to {args.directory}")


if __name__ == "__main__":
    main()
