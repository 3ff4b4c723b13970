"""Input channels for ``Estimator.fit()``, as the SageMaker SDK takes them.

``fit()`` takes, for each channel, a URI (or a local path), a Runyard channel dict
(``{"uri": ..., "distribution": "ShardedByS3Key", ...}``, the API's own shape) or a
``TrainingInput``: this module's, or SageMaker's own, since both describe the channel in
CreateTrainingJob's shape (their ``config``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from runyard.client import RunyardError

log = logging.getLogger(__name__)

# CreateTrainingJob's channel fields that Runyard's channels have, and what Runyard calls
# them; the rest (RecordWrapperType, ShuffleConfig, ...) change nothing here.
_CHANNEL_FIELDS = {
    "CompressionType": "compression",
    "ContentType": "content_type",
    "InputMode": "input_mode",
}
_S3_SOURCE_FIELDS = {
    "S3DataType": "s3_data_type",
    "S3DataDistributionType": "distribution",
}


class TrainingInput:
    """A channel's data, with the arguments of ``sagemaker.inputs.TrainingInput``.

    ``s3_data`` is an ``s3://`` or ``file://`` URI or a local path. Arguments Runyard has
    no use for are accepted and named once in a log line.
    """

    def __init__(
        self,
        s3_data: str,
        distribution: str | None = None,
        compression: str | None = None,
        content_type: str | None = None,
        record_wrapping: str | None = None,
        s3_data_type: str = "S3Prefix",
        instance_groups: list[str] | None = None,
        input_mode: str | None = None,
        attribute_names: list[str] | None = None,
        target_attribute_name: str | None = None,
        shuffle_config: Any = None,
        hub_access_config: dict[str, Any] | None = None,
        model_access_config: dict[str, Any] | None = None,
    ) -> None:
        source: dict[str, Any] = {"S3DataType": s3_data_type, "S3Uri": s3_data}
        source["S3DataDistributionType"] = distribution or "FullyReplicated"
        self.config: dict[str, Any] = {"DataSource": {"S3DataSource": source}}
        given = {
            "CompressionType": compression,
            "ContentType": content_type,
            "InputMode": input_mode,
            "RecordWrapperType": record_wrapping,
        }
        self.config.update({key: value for key, value in given.items() if value is not None})
        note_unused(
            "TrainingInput",
            record_wrapping=record_wrapping,
            instance_groups=instance_groups,
            attribute_names=attribute_names,
            target_attribute_name=target_attribute_name,
            shuffle_config=shuffle_config,
            hub_access_config=hub_access_config,
            model_access_config=model_access_config,
        )


def note_unused(what: str, **arguments: Any) -> None:
    """Name, in one log line, the arguments given to ``what`` that Runyard does not use."""
    given = sorted(name for name, value in arguments.items() if value is not None)
    if given:
        log.warning("%s: Runyard does not use %s; ignored", what, ", ".join(given))


def channels(inputs: Any, input_mode: str | None = None) -> dict[str, Any]:
    """``fit()``'s ``inputs`` as the API's ``inputs``. One URI or TrainingInput alone is
    the ``training`` channel, as in SageMaker; ``input_mode`` is the estimator's, for
    channels that do not name their own."""
    if inputs is None:
        return {}
    if not isinstance(inputs, dict):
        inputs = {"training": inputs}
    return {str(name): _channel(str(name), value, input_mode) for name, value in inputs.items()}


def _channel(name: str, value: Any, input_mode: str | None) -> dict[str, Any]:
    if isinstance(value, str | Path):
        channel: dict[str, Any] = {"uri": str(value)}
    elif isinstance(value, dict):
        channel = dict(value)
    elif isinstance(getattr(value, "config", None), dict):
        channel = _from_config(name, value.config)
    else:
        raise RunyardError(
            f"inputs.{name}: expected a URI, a channel dict or a TrainingInput, "
            f"got {type(value).__name__}"
        )
    if isinstance(channel.get("uri"), str | Path):
        channel["uri"] = as_uri(str(channel["uri"]))
    if input_mode is not None:
        channel.setdefault("input_mode", input_mode)
    return channel


def _from_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    source = config.get("DataSource", {}).get("S3DataSource")
    if not isinstance(source, dict) or "S3Uri" not in source:
        # FileSystemInput (EFS, FSx for Lustre) is the other kind SageMaker has.
        raise RunyardError(
            f"inputs.{name}: only S3-style data sources (a URI) are supported, not {config}"
        )
    channel: dict[str, Any] = {"uri": source["S3Uri"]}
    channel.update({ours: source[key] for key, ours in _S3_SOURCE_FIELDS.items() if key in source})
    channel.update({ours: config[key] for key, ours in _CHANNEL_FIELDS.items() if key in config})
    return channel


def as_uri(value: str, relative_to: Path | None = None) -> str:
    """A URI as given, or a local path (relative to ``relative_to``, else the current
    directory) as a ``file://`` URI."""
    return value if "://" in value else ((relative_to or Path()) / value).resolve().as_uri()


__all__ = ["TrainingInput"]
