"""Fails the way scripts do: an exception partway through."""

print("loading data", flush=True)


def load(path: str) -> None:
    raise FileNotFoundError(f"no training data at {path}")


load("/data/train.csv")
