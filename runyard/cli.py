"""``runyard``: run the server, submit jobs, follow them.

Every command finds the server and its token from RUNYARD_HOME (or RUNYARD_URL and
RUNYARD_TOKEN). Errors print one line and exit non-zero.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml
from pydantic_core import ValidationError
from rich.text import Text

from contract.layout import DEFAULT_TENSORBOARD_PATH, IMAGE_BASE_DIR
from runyard import (
    cloning,
    detached,
    job_commands,
    refusals,
    spec_files,
    terminal,
    tuning_commands,
    variables,
)
from runyard.client import (
    DEFAULT_PORT,
    PROJECT_VARIABLE,
    Client,
    RunyardError,
    discover,
    runyard_home,
)
from runyard.image_commands import images_group
from runyard.inputs import as_uri
from runyard.output import (
    describe_lines,
    duration,
    final_metric_lines,
    final_summary,
    job_table,
    log_line,
    still_running,
    submitted,
    table,
    transition_line,
    when,
)

if TYPE_CHECKING:
    from service.settings import Settings

EXIT_JOB_DID_NOT_COMPLETE = 1


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RunyardError as exc:
            click.echo(f"error: {exc}{_job_name_hint(exc)}", err=True)
            sys.exit(1)
        except ValidationError as exc:
            if exc.title != "Settings":
                raise
            # A setting from the environment that Runyard cannot use: say which variable,
            # not the traceback of the model that read it.
            for error in exc.errors():
                click.echo(f"error: {_setting_problem(error)}", err=True)
            sys.exit(2)


_UNKNOWN_JOB = re.compile(r"^no training job named '(?P<name>[^']+)'")
# The newest jobs a mistyped name is compared with: one page, never the whole list.
_HINT_CANDIDATES = 100


def _job_name_hint(error: RunyardError) -> str:
    """For a job the server does not know: the closest of the project's newest job names,
    as a hint (nothing where none is close, or the list cannot be read)."""
    unknown = _UNKNOWN_JOB.match(str(error)) if error.status_code == 404 else None
    if unknown is None:
        return ""
    try:
        with Client() as client:
            page = client.list_jobs(limit=_HINT_CANDIDATES)
    except RunyardError:
        return ""
    names = [item["name"] for item in page["items"]]
    close = difflib.get_close_matches(unknown["name"], names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _setting_problem(error: Any) -> str:
    """One of the settings' errors, naming the variable it is about."""
    message = str(error["msg"])
    named = message.removeprefix("Value error, ")
    if not error["loc"]:
        # A rule across settings: its input is every setting, secrets among them, and
        # its message names the variables.
        return named
    variable = "RUNYARD_" + "__".join(str(part) for part in error["loc"]).upper()
    if named.startswith(variable):
        return named  # it says which entry, which the whole value would drown
    return f"{variable}={error.get('input')!r}: {message}"


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="runyard")
@click.option(
    "--project",
    metavar="NAME",
    envvar=PROJECT_VARIABLE,
    help=f"Work in this project (default: the token's own; {PROJECT_VARIABLE}).",
)
def main(project: str | None) -> None:
    """Runyard: self-hosted managed training jobs.

    Start the server with `runyard server`, then submit a script with `runyard submit`.
    """
    if project:
        # Every Client made below works in it.
        os.environ[PROJECT_VARIABLE] = project


# -- running the service ---------------------------------------------------------------


def _listening(command: Callable[..., None]) -> Callable[..., None]:
    """--host and --port, for the commands that serve the API."""
    command = click.option(
        "--port",
        default=DEFAULT_PORT,
        envvar=variables.PORT,
        show_default=True,
        type=int,
        help=f"Port to listen on (or {variables.PORT}).",
    )(command)
    return click.option(
        "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
    )(command)


@main.group(invoke_without_command=True)
@_listening
@click.option(
    "--detach",
    "-d",
    is_flag=True,
    help=f"Run in the background, its output in RUNYARD_HOME/{detached.LOG_NAME}; return "
    "once it answers. `runyard server stop` stops it.",
)
@click.pass_context
def server(ctx: click.Context, host: str, port: int, detach: bool) -> None:
    """Run the API, worker and beat together on the embedded defaults.

    Everything lives in RUNYARD_HOME (default ~/.runyard): a SQLite database, a SQLite
    broker, the artifact store, and the admin token (written to RUNYARD_HOME/token).
    """
    if ctx.invoked_subcommand is not None:
        return
    if detach:
        from runyard.server import check_port_free, client_url

        home = runyard_home()
        if (already := detached.running(home)) is not None:
            raise RunyardError(f"a Runyard server is already running on {home} at {already.url}")
        check_port_free(host, port)
        started = detached.start(home, host, port, client_url(host, port))
        click.echo(
            f"Runyard is ready at {started.url} (pid {started.pid}; admin token in "
            f"{home / 'token'}; log: {home / detached.LOG_NAME})"
        )
        return
    from runyard.server import run_all

    run_all(_server_settings(port), host, port)


@server.command("status")
def server_status() -> None:
    """Whether a server runs on RUNYARD_HOME, and where (exit 3 when none does)."""
    home = runyard_home()
    found = detached.running(home)
    if found is None:
        click.echo(f"no Runyard server is running on {home}")
        sys.exit(3)  # as LSB init scripts' status: not running
    click.echo(f"running at {found.url} (pid {found.pid}); log: {home / detached.LOG_NAME}")


@server.command("stop")
def server_stop() -> None:
    """Stop the server running on RUNYARD_HOME and wait until it has ended (its jobs'
    instances are stopped with it)."""
    home = runyard_home()
    stopped = detached.stop(home)
    if stopped is None:
        click.echo(f"no Runyard server is running on {home}")
        return
    click.echo(f"stopped the server at {stopped.url} (pid {stopped.pid})")


@main.command()
@_listening
def api(host: str, port: int) -> None:
    """Run only the API (migrates the database first). For compose and Kubernetes."""
    from runyard.server import run_api

    run_api(_server_settings(port), host, port)


@main.command()
@click.option("--concurrency", default=4, show_default=True, type=int, help="Tasks run at once.")
def worker(concurrency: int) -> None:
    """Run only the Celery worker that drives jobs and their instances."""
    from runyard.server import run_worker
    from service.settings import get_settings

    run_worker(get_settings(), concurrency)


@main.command()
def beat() -> None:
    """Run only Celery beat, which re-drives every live job periodically."""
    from runyard.server import run_beat
    from service.settings import get_settings

    run_beat(get_settings())


@main.command()
def controller() -> None:
    """Run the controller of TrainingJob and HyperparameterTuningJob resources: the kubectl
    way in (see docs/kubernetes-resources.md). Replicas elect one that acts; it stops on
    SIGTERM, giving its Lease up."""
    import signal
    import threading

    from service.custom_resources.loop import serve
    from service.settings import get_settings

    settings = get_settings()
    if not settings.controller.namespaces:
        raise click.UsageError(
            "RUNYARD_CONTROLLER__NAMESPACES names no namespace to take TrainingJobs from"
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        serve(settings, stop)
    except KeyboardInterrupt:
        stop.set()


@main.command()
def migrate() -> None:
    """Bring the database schema up to date and make sure an admin token exists."""
    from runyard.server import prepare
    from service.settings import get_settings

    prepare(get_settings())
    click.echo("database is up to date")


def _server_settings(port: int) -> Settings:
    import os

    from service.settings import Settings

    if os.environ.get(variables.PUBLIC_URL):
        return Settings()
    # Instances reach the server on the port it listens on.
    return Settings(public_url=f"http://127.0.0.1:{port}")


# -- jobs --------------------------------------------------------------------------------


def _pairs(
    values: tuple[str, ...], option: str, parse_json: bool = False, shape: str = "KEY=VALUE"
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected {shape}, got {item!r}", param_hint=option)
        if parse_json:
            try:
                result[key] = json.loads(value)
            except json.JSONDecodeError:
                result[key] = value
        else:
            result[key] = value
    return result


# The flags that make a job's spec, shared by submit and clone.
_SPEC_FLAGS = [
    click.option("--name", help="Job name (unique). Default: <base-job-name>-<timestamp>."),
    click.option("--base-job-name", help="Prefix for a generated job name."),
    click.option("--entry-point", "-e", help="Script to run, relative to the source (train.py)."),
    click.option(
        "--source-dir",
        "-s",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="Local directory with the code; packed and stored on the server.",
    ),
    click.option("--source-uri", help="Code already stored: file:// directory or .tar.gz."),
    click.option("--instance-type", "-t", help="Instance type, e.g. local or ml.p4d.24xlarge."),
    click.option(
        "--framework", type=click.Choice(["pytorch", "tensorflow"]), help="The script's framework."
    ),
    click.option("--framework-version", help="Run on the catalog's image of this version (2.13)."),
    click.option("--py-version", help="...with this Python (py311)."),
    click.option(
        "--image-uri",
        help="A catalog image (runyard images list), or an OCI image to run as a container.",
    ),
    click.option("--instance-count", "-n", type=int, help="Number of instances."),
    click.option(
        "--distribution", "-d", help='JSON, e.g. \'{"torch_distributed": {"enabled": true}}\'.'
    ),
    click.option(
        "--hyperparameter",
        "-H",
        "hyperparameters",
        multiple=True,
        metavar="KEY=VALUE",
        help="Repeatable. VALUE is parsed as JSON when it can be (0.1, true, [1,2]).",
    ),
    click.option(
        "--input",
        "-i",
        "inputs",
        multiple=True,
        metavar="CHANNEL=URI",
        help="Repeatable. A file:// URI or a local path.",
    ),
    click.option(
        "--output-path", help="Where the model goes (default: the server's artifact store)."
    ),
    click.option("--max-run", type=int, help="Seconds before the job is stopped (max_run)."),
    click.option(
        "--env",
        "environment",
        multiple=True,
        metavar="KEY=VALUE",
        help="Repeatable. Script environment.",
    ),
    click.option(
        "--metric-definition",
        "metric_definitions",
        multiple=True,
        metavar="NAME=REGEX",
        help="Repeatable. A metric the job's lines hold: REGEX's one group is its value "
        "(--metric-definition 'loss=loss: ([0-9.]+)').",
    ),
    click.option(
        "--tag",
        "tags",
        multiple=True,
        metavar="KEY=VALUE",
        help="Repeatable. A tag of the job (runyard list --tag KEY=VALUE finds it).",
    ),
    click.option(
        "--backend", help="Run on this backend instead of the one configured for the type."
    ),
    click.option(
        "--checkpoint-s3-uri", help="Where checkpoints are kept across restarts (s3:// or file://)."
    ),
    click.option(
        "--checkpoint-local-path",
        help=f"Where the script writes them (default {IMAGE_BASE_DIR}/checkpoints).",
    ),
    click.option(
        "--tensorboard-s3-output-path",
        help="Where the script's TensorBoard data is stored, below <uri>/<job>/tensorboard-output.",
    ),
    click.option(
        "--tensorboard-local-path",
        help=f"Where the script writes it (default {DEFAULT_TENSORBOARD_PATH}).",
    ),
    click.option(
        "--use-spot-instances",
        is_flag=True,
        default=None,
        help="Run on spot capacity (needs --max-wait).",
    ),
    click.option("--max-wait", type=int, help="With spot: seconds in all, waiting included."),
    click.option(
        "--max-retry-attempts", type=int, help="Restarts allowed after the script fails (0-30)."
    ),
    click.option("--priority", type=int, help="Place in the queue for capacity (higher first)."),
    click.option(
        "--network-isolation",
        "enable_network_isolation",
        is_flag=True,
        default=None,
        help="Instances reach each other only, nothing beyond (EnableNetworkIsolation).",
    ),
]


def _spec_flags(command: Callable[..., None]) -> Callable[..., None]:
    for flag in reversed(_SPEC_FLAGS):
        command = flag(command)
    return command


# What to do with a submission, shared by submit and clone.
_SUBMISSION_FLAGS = [
    click.option(
        "--dry-run",
        is_flag=True,
        help="Print the job as it would be created (every field with its default, the image "
        "chosen, the hosts) as YAML; create nothing.",
    ),
    click.option(
        "--plan",
        "show_plan",
        is_flag=True,
        help="With --dry-run (implied): print the backend's plan instead (what it would run "
        "on each host).",
    ),
    click.option(
        "--wait", is_flag=True, help="Wait until the job ends; exit non-zero unless it Completed."
    ),
    click.option(
        "--logs", "show_logs", is_flag=True, help="Stream the job's logs (implies --wait)."
    ),
]


def _submission_flags(command: Callable[..., None]) -> Callable[..., None]:
    for flag in reversed(_SUBMISSION_FLAGS):
        command = flag(command)
    return command


@main.command()
@click.argument(
    "spec_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@_spec_flags
@_submission_flags
def submit(
    spec_file: Path | None,
    source_dir: Path | None,
    dry_run: bool,
    show_plan: bool,
    wait: bool,
    show_logs: bool,
    hyperparameters: tuple[str, ...],
    inputs: tuple[str, ...],
    environment: tuple[str, ...],
    distribution: str | None,
    **flags: Any,
) -> None:
    """Submit a training job from flags and/or a YAML/JSON SPEC_FILE (flags win).

    In a spec file, `source_dir` and local paths in `inputs` are relative to the file.
    """
    spec = spec_files.load_spec_file(spec_file) if spec_file else {}
    here = spec_file.parent if spec_file else Path.cwd()
    if "source_dir" in spec:
        from_file = here / str(spec.pop("source_dir"))
        if flags.get("source_uri") is None:  # else the flag's stored code wins
            source_dir = source_dir or from_file
    spec_files.inputs_relative_to(spec, here)
    _submit_spec(
        spec,
        source_dir,
        dry_run=dry_run or show_plan,
        show_plan=show_plan,
        wait=wait,
        show_logs=show_logs,
        hyperparameters=hyperparameters,
        inputs=inputs,
        environment=environment,
        distribution=distribution,
        flags=flags,
    )


def _submit_spec(
    spec: dict[str, Any],
    source_dir: Path | None,
    *,
    dry_run: bool,
    show_plan: bool,
    wait: bool,
    show_logs: bool,
    hyperparameters: tuple[str, ...],
    inputs: tuple[str, ...],
    environment: tuple[str, ...],
    distribution: str | None,
    flags: dict[str, Any],
) -> None:
    """Submit ``spec`` with the command line's flags over it."""
    definitions = flags.pop("metric_definitions", ())
    tags = flags.pop("tags", ())
    _override(spec, {key: value for key, value in flags.items() if value is not None})
    if definitions:
        named = _pairs(definitions, "--metric-definition", shape="NAME=REGEX")
        spec["metric_definitions"] = _merged(
            spec.get("metric_definitions"), named, key="name", value="regex"
        )
    if tags:
        spec["tags"] = _merged(
            _tag_list(spec.get("tags")), _pairs(tags, "--tag"), key="key", value="value"
        )
    if distribution is not None:
        try:
            spec["distribution"] = json.loads(distribution)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--distribution") from exc
    if hyperparameters:
        spec["hyperparameters"] = {
            **spec.get("hyperparameters", {}),
            **_pairs(hyperparameters, "-H", True),
        }
    if environment:
        spec["environment"] = {**spec.get("environment", {}), **_pairs(environment, "--env")}
    if inputs:
        spec["inputs"] = {
            **spec.get("inputs", {}),
            **{k: as_uri(v, Path.cwd()) for k, v in _pairs(inputs, "-i").items()},
        }
    with Client() as client:
        if source_dir is not None:
            # A dry run stores no code: the server checks it and says where it would go.
            spec["source_uri"] = client.upload_source(
                source_dir,
                entry_point=spec.get("entry_point"),
                dry_run=dry_run,
                progress=spec_files.upload_progress(source_dir),
            )
        if "source_uri" not in spec and "image_uri" not in spec:
            # (A container image brings its own program: the server says which need code.)
            raise RunyardError("give --source-dir (local code) or --source-uri (stored code)")
        if dry_run:
            planned = _create(client, spec, dry_run=True)
            click.echo(planned["rendered"] if show_plan else _resolved_yaml(planned), nl=show_plan)
            return
        job = _create(client, spec)
        click.echo(submitted(job["name"]))
        if wait or show_logs:
            sys.exit(_follow(client, job["name"], show_logs))


def _resolved_yaml(planned: dict[str, Any]) -> str:
    """A dry run's job as YAML, as `kubectl --dry-run=server -o yaml` shows a resource: the
    fields a created job's spec would hold, with its name, backend and hosts."""
    shown = {
        "name": planned["name"],
        "backend": planned["backend"],
        "hosts": planned["hosts"],
        "spec": planned["spec"],
    }
    return str(yaml.safe_dump(shown, sort_keys=False, default_flow_style=False))


def _create(client: Client, spec: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    try:
        return client.create_job(spec, dry_run=dry_run)
    except RunyardError as exc:
        raise refusals.in_flags(exc) from None


@main.command()
@click.argument("original")
@_spec_flags
@_submission_flags
def clone(
    original: str,
    source_dir: Path | None,
    dry_run: bool,
    show_plan: bool,
    wait: bool,
    show_logs: bool,
    hyperparameters: tuple[str, ...],
    inputs: tuple[str, ...],
    environment: tuple[str, ...],
    distribution: str | None,
    **flags: Any,
) -> None:
    """Submit ORIGINAL's job again, as it was submitted, under a new name (--name, or one
    generated from ORIGINAL's); submit's flags change what they name."""
    with Client() as client:
        spec = cloning.request_of(client, original)
    if source_dir is not None or flags.get("source_uri") is not None:
        spec.pop("source_uri", None)
    _submit_spec(
        spec,
        source_dir,
        dry_run=dry_run or show_plan,
        show_plan=show_plan,
        wait=wait,
        show_logs=show_logs,
        hyperparameters=hyperparameters,
        inputs=inputs,
        environment=environment,
        distribution=distribution,
        flags=flags,
    )


def _merged(items: Any, pairs: dict[str, str], *, key: str, value: str) -> list[Any]:
    """A spec's list of pairs (tags' key and value, metric definitions' name and regex)
    with the flags' ``pairs`` added; a flag's replaces the spec's of the same ``key``."""
    kept = [
        item
        for item in (items if isinstance(items, list) else [])
        if not (isinstance(item, dict) and item.get(key) in pairs)
    ]
    return [*kept, *({key: name, value: text} for name, text in pairs.items())]


def _tag_list(tags: Any) -> Any:
    """A spec file's tags as a list of ``{key, value}``, however the file wrote them (a
    mapping, or SageMaker's ``[{Key, Value}]``), so that --tag flags replace the same keys;
    anything else is left for the server to refuse."""
    if isinstance(tags, dict):
        return [{"key": key, "value": value} for key, value in tags.items()]
    if isinstance(tags, list):
        return [
            {"key": tag["Key"], "value": tag.get("Value", "")}
            if isinstance(tag, dict) and "Key" in tag and tag.keys() <= {"Key", "Value"}
            else tag
            for tag in tags
        ]
    return tags


# A job's name is given one way: a name from the flags replaces a prefix from the file,
# and the other way round.
_NAMING = ("name", "base_job_name")


def _override(spec: dict[str, Any], flags: dict[str, Any]) -> None:
    if any(key in flags for key in _NAMING):
        for key in _NAMING:
            spec.pop(key, None)
    spec.update(flags)


def _follow(client: Client, name: str, show_logs: bool) -> int:
    try:
        if show_logs:
            printer = terminal.LogPrinter()
            for item in _log_stream(client, name, host=None):
                if "end" not in item:
                    printer.print(log_line(item), item["host"])
            job = client.wait(name)
        else:
            job = _watch(client, name)
    except KeyboardInterrupt:
        click.echo(f"\n{still_running(name)}", err=True)
        return 130
    for line in final_summary(job):
        terminal.print_lines([line])
    return 0 if job["status"] == "Completed" else EXIT_JOB_DID_NOT_COMPLETE


ENDED = ("Completed", "Failed", "Stopped")


def _watch(client: Client, name: str) -> dict[str, Any]:
    """Wait for the job to end, printing each status transition as it happens, with the
    time waited so far; on a terminal a line below them keeps counting."""
    shown = 0
    began = time.monotonic()
    out = terminal.console()
    with out.status("", spinner="dots") if out.is_terminal else contextlib.nullcontext() as live:
        while True:
            job = client.get_job(name)
            waited = duration(time.monotonic() - began)
            for transition in job["transitions"][shown:]:
                out.print(terminal.coloured(f"{transition_line(transition)}  (+{waited})"))
            shown = len(job["transitions"])
            if job["status"] in ENDED:
                out.print(Text(f"Waited {waited}"))
                return job
            if live is not None:
                why = f": {job['pending_reason']}" if job.get("pending_reason") else ""
                live.update(Text(f"{job['status']} ({job['secondary_status']}{why}), {waited}"))
            time.sleep(1.0)


@main.command("list")
@click.option(
    "--status", type=click.Choice(["InProgress", "Completed", "Failed", "Stopping", "Stopped"])
)
@click.option("--prefix", "name_prefix", help="Only jobs whose name starts with this.")
@click.option("--name-contains", help="Only jobs whose name contains this (any case).")
@click.option(
    "--tag", "tags", multiple=True, help="Only jobs with this tag: KEY or KEY=VALUE; repeatable."
)
@click.option(
    "--sort",
    type=click.Choice(["-created_at", "created_at", "name", "-name"]),
    help="The order: newest first (-created_at) unless given.",
)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor", help="next_cursor printed by the previous page (same --sort).")
@terminal.output_option
def list_jobs(
    status: str | None,
    name_prefix: str | None,
    name_contains: str | None,
    tags: tuple[str, ...],
    sort: str | None,
    limit: int,
    cursor: str | None,
    output: str,
) -> None:
    """List training jobs, newest first unless --sort says otherwise."""
    with Client() as client:
        page = client.list_jobs(
            status=status,
            name_prefix=name_prefix,
            name_contains=name_contains,
            tags=tags,
            sort=sort,
            limit=limit,
            cursor=cursor,
        )
    if output == "json":
        terminal.print_json(page)  # {"items": [...], "next_cursor": ...}
        return
    terminal.print_lines(job_table(page["items"]))
    if page["next_cursor"]:
        # The next page is of the same list: its filters and order with the cursor.
        same = [
            *(["--status", status] if status else []),
            *(["--prefix", name_prefix] if name_prefix else []),
            *(["--name-contains", name_contains] if name_contains else []),
            *[word for tag in tags for word in ("--tag", tag)],
            *(["--sort", sort] if sort else []),
        ]
        again = shlex.join(["runyard", "list", *same, "--cursor", page["next_cursor"]])
        click.echo(f"more: {again}")


@main.command()
@click.argument("name")
@terminal.output_option
@click.option("--json", "as_json", is_flag=True, hidden=True, help="As --output json.")
def describe(name: str, output: str, as_json: bool) -> None:
    """Show a job's status, times, image, hyperparameters, channels, output, transitions,
    failure reason, model and final metrics."""
    with Client() as client:
        job = client.get_job(name)
    if as_json or output == "json":
        terminal.print_json(job)
        return
    terminal.print_lines(
        [*describe_lines(job), *final_metric_lines(job.get("final_metrics") or [])]
    )


@main.command()
@click.argument("name")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the job ends.")
@click.option("--host", help="Only this host's lines, e.g. algo-2.")
@click.option("--timestamps", is_flag=True, help="Begin each line with the time it was printed.")
@terminal.output_option
def logs(name: str, follow: bool, host: str | None, timestamps: bool, output: str) -> None:
    """Print a job's logs, each line prefixed by its host (--output json: one JSON object
    a line, with its host, time, stream and message)."""
    with Client() as client:
        try:
            lines = _log_stream(client, name, host) if follow else client.logs(name, host=host)
            printer = terminal.LogPrinter()
            for item in lines:
                if "end" in item:
                    continue
                if output == "json":
                    terminal.print_json_line(item)
                else:
                    printer.print(log_line(item, timestamp=timestamps), item["host"])
        except KeyboardInterrupt:
            click.echo(f"\n{still_running(name)}", err=True)
            sys.exit(130)


def _log_stream(client: Client, name: str, host: str | None) -> Iterator[dict[str, Any]]:
    """The job's lines as they come; while it waits to start, what it waits for (on
    stderr, each reason once), so that a quiet stream is not taken for a stuck one."""
    said = None
    while True:
        job = client.get_job(name)
        reason = job.get("pending_reason")
        if not reason or job["status"] in ENDED or job.get("instances"):
            break
        if reason != said:
            click.echo(f"waiting: {reason}", err=True)
            said = reason
        time.sleep(WAITING_POLL_SECONDS)
    yield from client.follow_logs(name, host=host)


WAITING_POLL_SECONDS = 2.0


@main.command()
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait until the job has stopped.")
def stop(name: str, wait: bool) -> None:
    """Stop a running job: its scripts get SIGTERM and a grace period to save."""
    with Client() as client:
        job = client.stop_job(name)
        click.echo(f"{name}: {job['status']}")
        if wait:
            job = _watch(client, name)
            click.echo(f"{name}: {job['status']}")


@main.command()
@click.argument("name")
@click.option("--host", default="algo-1", show_default=True, help="The instance interrupted.")
@click.option(
    "--message", default="spot capacity reclaimed", show_default=True, help="Why, for the record."
)
def interrupt(name: str, host: str, message: str) -> None:
    """Rehearse a spot interruption of a spot job: its scripts get SIGTERM and a grace
    period to checkpoint, then the job waits for capacity and resumes."""
    with Client() as client:
        job = client.interrupt(name, host, message)
    click.echo(f"{name}: interruption noticed ({job['status']}, {job['secondary_status']})")


@main.command()
def url() -> None:
    """Print the URL of the server the CLI talks to: RUNYARD_URL, or the one `runyard
    server` recorded in RUNYARD_HOME."""
    click.echo(discover()[0])


@main.command()
@click.option(
    "--create", "create_name", metavar="NAME", help="Mint another API token with this name."
)
@click.option(
    "--role",
    type=click.Choice(["viewer", "member", "admin"]),
    default="member",
    show_default=True,
    help="With --create: what the new token may do in its project.",
)
@click.option(
    "--project",
    metavar="NAME",
    help="With --create or --revoke: the token's project (default: your own).",
)
@click.option("--list", "list_tokens", is_flag=True, help="List the project's tokens (admins).")
@click.option("--revoke", "revoke_name", metavar="NAME", help="Revoke the token of this name.")
@click.option(
    "--aws",
    is_flag=True,
    help="Print the token (with --create: the new one) as AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, for boto3 and the SageMaker SDK.",
)
def token(
    create_name: str | None,
    role: str,
    project: str | None,
    list_tokens: bool,
    revoke_name: str | None,
    aws: bool,
) -> None:
    """Print the API token the CLI uses, or create, list or revoke tokens.

    A project's admins manage its tokens; a server administrator, any project's."""
    if sum(bool(x) for x in (create_name, list_tokens, revoke_name)) > 1:
        raise click.UsageError("give one of --create, --list and --revoke")
    if aws and (list_tokens or revoke_name):
        raise click.UsageError("--aws goes alone or with --create")
    with Client() as client:
        if create_name:
            created = client.create_token(create_name, project=project, role=role)
            click.echo(
                f"# {created['name']}: {created['role']} in project {created['project']}",
                err=True,
            )
            if aws:
                with Client(url=client.url, token=created["token"]) as new:
                    _echo_aws_credentials(new)
            else:
                click.echo(created["token"])
            return
        if aws:
            _echo_aws_credentials(client)
            return
        if list_tokens:
            rows = [
                [
                    t["project"],
                    t["name"],
                    t["role"] + " (server admin)" * t["server_admin"],
                    when(t["created_at"]),
                    when(t["last_used_at"]),
                ]
                for t in client.list_tokens()
            ]
            for line in table(["PROJECT", "NAME", "ROLE", "CREATED", "LAST USED"], rows):
                click.echo(line)
            return
        if revoke_name:
            client.revoke_token(revoke_name, project=project or client.project)
            click.echo(f"revoked {revoke_name}")
            return
        if not client.token:
            raise RunyardError(
                f"no token found; start `runyard server` once, or set {variables.TOKEN}"
            )
        click.echo(client.token)


def _echo_aws_credentials(client: Client) -> None:
    # NAME=value lines: `export $(runyard token --aws)` puts them in the environment.
    credentials = client.aws_credentials()
    click.echo(f"AWS_ACCESS_KEY_ID={credentials['access_key_id']}")
    click.echo(f"AWS_SECRET_ACCESS_KEY={credentials['secret_access_key']}")


main.add_command(images_group)
main.add_command(tuning_commands.tune)
main.add_command(tuning_commands.tuning_group)
for _command in (job_commands.metrics, job_commands.download, job_commands.delete):
    main.add_command(_command)


@main.group("project")
def project_group() -> None:
    """Projects: every job and token belongs to one."""


@project_group.command("create")
@click.argument("name")
def project_create(name: str) -> None:
    """Create a project (server administrators)."""
    with Client() as client:
        click.echo(client.create_project(name)["name"])


@project_group.command("list")
def project_list() -> None:
    """The projects your token reaches."""
    with Client() as client:
        rows = [[p["name"], when(p["created_at"])] for p in client.list_projects()]
    for line in table(["NAME", "CREATED"], rows):
        click.echo(line)


@project_group.command("grants")
@click.argument("project")
def project_grants(project: str) -> None:
    """The places granted to PROJECT beyond its own area (its admins, and server
    administrators)."""
    with Client() as client:
        rows = [
            [g["prefix"], g["access"], when(g["created_at"])] for g in client.list_grants(project)
        ]
    for line in table(["PREFIX", "ACCESS", "GRANTED"], rows):
        click.echo(line)


@project_group.command("grant")
@click.argument("project")
@click.argument("prefix")
@click.option(
    "--read-write",
    "access",
    flag_value="read-write",
    help="Its jobs may also write there (no other project may be granted to write there).",
)
@click.option(
    "--read-only",
    "access",
    flag_value="read-only",
    default=True,
    help="Its jobs may only read there (the default).",
)
def project_grant(project: str, prefix: str, access: str) -> None:
    """Let PROJECT's jobs use PREFIX (server administrators).

    PREFIX is a file:///directory (an absolute path is taken as one; it must lie in the
    server's RUNYARD_FILE_ROOTS) or an s3://bucket/prefix. A project other than default
    reads and writes only its own area of the artifact root and what it is granted;
    granting again changes how."""
    if prefix.startswith("/"):
        prefix = Path(prefix).as_uri()
    with Client() as client:
        granted = client.grant(project, prefix, access=access)
    click.echo(f"granted {granted['project']} {granted['access']} {granted['prefix']}")


@project_group.command("revoke")
@click.argument("project")
@click.argument("prefix")
def project_revoke(project: str, prefix: str) -> None:
    """Take back PROJECT's grant of PREFIX (server administrators). Jobs submitted from
    now on may not name it; jobs already submitted lose it when their instances start or
    renew their AWS credentials."""
    if prefix.startswith("/"):
        prefix = Path(prefix).as_uri()
    with Client() as client:
        client.revoke_grant(project, prefix)
    click.echo(f"revoked {project}'s grant of {prefix}")
