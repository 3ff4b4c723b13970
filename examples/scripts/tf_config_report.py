"""Prints the TF_CONFIG a TensorFlow script would read (without needing TensorFlow)."""

import os

print("TF_CONFIG " + os.environ.get("TF_CONFIG", "<unset>"), flush=True)
