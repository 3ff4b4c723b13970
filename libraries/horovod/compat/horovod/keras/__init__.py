"""``horovod.keras``: not offered by Runyard; importing it says why."""

from libraries.horovod.refusals import OTHER_FRAMEWORKS

raise ImportError(f"horovod.keras: {OTHER_FRAMEWORKS}", name=__name__)
