"""What the runtime on one instance says it is doing, in the words of its reports."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"


# An instance's result: reported once, never changed.
FINAL_PHASES = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.STOPPED})
