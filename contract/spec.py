"""A job as its instances need it: what every backend launches and every instance config
says, and nothing of how the API received it.

A ``JobSpec`` is the instance-facing part of the job's stored record
(``service.jobs.record.JobFields``), field for field under the same names: the server
copies it by name (``JobFields.job_spec_at``), the backends plan from it, and each
instance gets it whole in ``runyard.json`` (``contract.instance_config.JobDescription``).
A field of the job that a backend or an instance needs is added here and in the record,
nowhere between. Field names are the API's, so a problem found below the API
(``Problem.loc``) names the field a user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract import storage
from contract.hosts import host_names
from contract.images import Choice
from contract.layout import channel_file

# The fields a job writes through, and the folders below each URI that it writes in
# ("{job}" is the job's name): its outputs below output_path/<job>, as SageMaker lays
# them out, its checkpoints at the URI itself, its TensorBoard data below
# <uri>/<job>/tensorboard-output (where the SageMaker SDK looks for it).
WRITTEN: dict[str, tuple[str, ...]] = {
    "output_path": ("{job}",),
    "checkpoint_s3_uri": (),
    "tensorboard_s3_output_path": ("{job}", "tensorboard-output"),
}


@dataclass(frozen=True)
class Channel:
    """An input channel, in the terms of SageMaker's InputDataConfig."""

    # A prefix (every object under it), or a manifest file listing the objects.
    uri: str
    s3_data_type: str = "S3Prefix"
    distribution: str = "FullyReplicated"
    input_mode: str = "File"
    content_type: str | None = None
    compression: str = "None"


@dataclass(frozen=True)
class JobSpec:
    # Empty for a job with a container entry point, which brings its own code (in a
    # channel, as the SageMaker SDK v3's ModelTrainer sends it).
    entry_point: str
    # A URI, or a file in one of the job's channels (``layout.channel_file``).
    source_uri: str
    instance_type: str
    # Where the model goes: the job's own, or the server's artifact root.
    output_path: str
    # How (``storage.model_uri``): "GZIP", packed; "NONE", its files as they are.
    output_compression: str = "GZIP"
    instance_count: int = 1
    volume_size: int = 30
    framework: str = "pytorch"
    image_uri: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # As the estimator's ``distribution`` dict, modes not given left out.
    distribution: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Channel] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str | None = None
    # SageMaker's TensorBoardOutputConfig: what the script writes below the local path is
    # stored below the URI (``written_at``) while it runs and when it ends.
    tensorboard_s3_output_path: str | None = None
    tensorboard_local_path: str | None = None
    use_spot_instances: bool = False
    # SageMaker's AlgorithmSpecification.ContainerEntrypoint and ContainerArguments: run
    # this command on each instance instead of the entry point.
    container_entrypoint: tuple[str, ...] = ()
    container_arguments: tuple[str, ...] = ()
    # SageMaker's EnableNetworkIsolation: the job's hosts reach each other, nothing else.
    enable_network_isolation: bool = False
    # The image the instances run, as the server resolved it from image_uri or the
    # framework's version (``contract.images``).
    image: Choice = field(default_factory=Choice)

    @property
    def hosts(self) -> list[str]:
        return host_names(self.instance_count)

    @property
    def channel_uris(self) -> dict[str, str]:
        """Each input channel's URI, by name in name order."""
        return {name: channel.uri for name, channel in sorted(self.inputs.items())}

    @property
    def container_command(self) -> tuple[str, ...]:
        """The command each instance runs instead of the entry point (SageMaker's
        ContainerEntrypoint, then ContainerArguments); empty for an entry-point job."""
        return (*self.container_entrypoint, *self.container_arguments)

    def storage_uris(self) -> dict[tuple[str | int, ...], str]:
        """Every URI the job reads or writes, by the field that gives it."""
        uris: dict[tuple[str | int, ...], str] = {("output_path",): self.output_path}
        if self.source_uri and channel_file(self.source_uri) is None:
            uris[("source_uri",)] = self.source_uri
        if self.checkpoint_s3_uri:
            uris[("checkpoint_s3_uri",)] = self.checkpoint_s3_uri
        if self.tensorboard_s3_output_path:
            uris[("tensorboard_s3_output_path",)] = self.tensorboard_s3_output_path
        for name, channel in sorted(self.inputs.items()):
            uris[("inputs", name, "uri")] = channel.uri
        return uris

    def storage_uses(self, job_name: str) -> tuple[StorageUse, ...]:
        """How the job uses each of its URIs: read as given, or written below (``WRITTEN``).
        Worked out once a job name: preparing a job asks five times (each rule its own),
        and the joins cost a tenth of it."""
        # Kept in the instance's own dict, beside its fields (it is frozen): a copy made
        # with other fields (``dataclasses.replace``) starts without it.
        known: dict[str, tuple[StorageUse, ...]] = self.__dict__.setdefault("_uses_of", {})
        uses = known.get(job_name)
        if uses is None:
            uses = known[job_name] = tuple(
                StorageUse(loc, uri, self.written_at(str(loc[0]), job_name), writing=True)
                if loc[0] in WRITTEN
                else StorageUse(loc, uri, uri, writing=False)
                for loc, uri in self.storage_uris().items()
            )
        return uses

    def written_at(self, field_name: str, job_name: str) -> str:
        """Where job ``job_name`` writes through ``field_name`` (one of ``WRITTEN``); the
        URI as given where it is malformed (for other checks to name)."""
        uri = getattr(self, field_name) or ""
        below = [part.format(job=job_name) for part in WRITTEN[field_name]]
        if not below:
            return uri
        try:
            return storage.join(uri, *below)
        except storage.StorageError:
            return uri


@dataclass(frozen=True)
class StorageUse:
    """One of a job's URIs (``given`` in field ``loc``) and where the job reads or writes
    through it (``used``: its output folder below ``output_path``, say)."""

    loc: tuple[str | int, ...]
    given: str
    used: str
    writing: bool
