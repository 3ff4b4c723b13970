"""Sizes the runtime and the service both hold to."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contract import hyperparameters as hp

# A failure reason, as SageMaker's FailureReason: what the runtime reports and the job keeps.
MAX_REASON = 1024
# One log line: longer lines are cut by the runtime, and by the worker when it keeps an
# instance's console.
MAX_LINE = 16 * 1024

# Linux's MAX_ARG_STRLEN (32 pages): the most bytes one argument, or one NAME=value string
# of the environment, of a program being started may have, its final NUL included. One
# byte more and the start fails with E2BIG ("Argument list too long").
MAX_ARG_STRLEN = 32 * 4096
# The script's environment carries every hyperparameter in single variables: SM_HPS and
# SM_USER_ARGS, and SM_TRAINING_ENV beside everything else the instance knows (hosts and
# their addresses, channels, paths, the distribution). That everything else gets this
# much of the one string; sixteen hosts with twenty channels of the longest names, under
# a deep base directory, take about 25 KiB.
TRAINING_ENV_RESERVE = 32 * 1024
# The most bytes the hyperparameters may take in any of those variables.
MAX_HYPERPARAMETER_BYTES = MAX_ARG_STRLEN - TRAINING_ENV_RESERVE


def hyperparameter_bytes(values: Mapping[str, Any]) -> int:
    """The bytes ``values`` take in the largest variable of the script's environment that
    carries them all, built as the runtime builds it (``runtime/instance/environment.py``)
    from ``hyperparameters.json``: JSON with its default ASCII escapes, so every character
    is one byte. The ``sagemaker_*`` framework parameters are counted too: they go into
    SM_TRAINING_ENV beside the user's."""
    raw = {key: hp.encode(value) for key, value in values.items()}
    user, framework = hp.split_framework(hp.decode(raw))
    in_training_env = len(json.dumps(user)) + len(json.dumps(framework))
    as_arguments = len(json.dumps(hp.to_cli_args(user)))
    return max(in_training_env, as_arguments)


# The most lines one batch from an instance may hold: the service refuses more, the
# runtime sends no more.
MAX_LOG_BATCH = 5000
# The most bytes a batch's messages take as the runtime sends them (JSON with its ASCII
# escapes: a character of a progress bar, such as "\u2588", takes six). One line takes
# at most MAX_LINE characters of twelve bytes (a pair of escaped surrogates), far less.
MAX_LOG_BATCH_TEXT = 4 * 1024 * 1024
# The most bytes a batch's whole body takes: its messages, and each line's time, stream
# and punctuation (about 40 bytes). The service takes bodies of at least this size.
MAX_LOG_BATCH_BODY = MAX_LOG_BATCH_TEXT + MAX_LOG_BATCH * 64
