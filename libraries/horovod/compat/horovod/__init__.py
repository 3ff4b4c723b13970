"""Runyard's stand-in for the ``horovod`` package, in jobs under the ``mpi`` distribution.

It exists only inside those jobs' processes: the launcher puts the directory above on
their PYTHONPATH (and only where the training environment has no Horovod of its own), so
the service's environment never sees the name. ``horovod.torch`` is
``libraries.horovod``; the other frameworks' modules refuse with the reason.
"""

# The Horovod release whose torch API this follows, marked as Runyard's.
__version__ = "0.28.1+runyard"
