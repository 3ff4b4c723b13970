"""``horovod.torch``: Runyard's Horovod API for PyTorch, re-exported whole."""

from libraries.horovod import *  # noqa: F403
from libraries.horovod import __all__ as __all__
from libraries.horovod.refusals import missing_name


def __getattr__(name: str) -> object:
    raise missing_name(__name__, name)
