"""``smdistributed.dataparallel.torch``: the PyTorch flavour of the API."""
