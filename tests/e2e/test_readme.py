"""Every example in the README and in the pages of docs/ runs as written, against a real
`runyard server`.

The README's blocks run in their order, then each page's of PAGES in turn, as someone
following the README and then its links would run them; what a block leaves (the server,
files, jobs, tokens) is there for every later block, on whichever page:

- a shell block in its own `bash -e -o pipefail`, from a directory laid out as a checkout
  (the repository's top-level entries linked in, so what the blocks write lands there, not
  in the repository), in the environment an activated `.venv` gives, with a RUNYARD_HOME
  and a port of its own (RUNYARD_PORT);
- a Python block with `python`, from that directory;
- a YAML block headed `# <name>.yaml` is saved under that name, for the blocks that use it;
- the directory the tour keeps its files in (TOUR) is one of the test's own, wherever a
  block names it.

Only the blocks named in SKIPPED do not run, each for the reason given there. When all
have run, every job they made has ended as they meant it to, and every metric their specs
define was found in the job's output. A page of docs/ with a block of those languages must
be in PAGES, so none goes unrun.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from provisioning.local import processes
from provisioning.local.backend import free_port
from runyard.client import Client, admin_token, wait_until_up
from tests.e2e.conftest import REPO
from tests.timeouts import scaled

pytestmark = pytest.mark.e2e

# The pages whose blocks run, in this order: the README first (its tour starts the server
# and makes the data the others use), then the pages of docs/ that have blocks.
PAGES = (
    "README.md",
    "docs/http-api.md",
    "docs/sagemaker.md",
    "docs/images.md",
    "docs/distribution-modes.md",
    "docs/fault-tolerance.md",
    "docs/projects.md",
    "docs/deploying.md",
    "docs/kubernetes-resources.md",
)
LANGUAGES = ("sh", "python", "yaml")
# A line only that block, of all the pages' blocks, has -> why it cannot run here.
SKIPPED = {
    "make demo": "`make test` runs this whole suite, this test included, and both first "
    "run `make install` into the .venv the tests run from",
    "docker compose build": "needs Docker",
    "apt-get install -y podman runc": "installs system packages and configures the machine's "
    "podman, as root; .ci/run does it for the suite, whose custom-container tests need it",
    "docker compose exec -T api runyard token": "needs Docker (the compose stack)",
    "kind load docker-image": "needs Docker and a kind cluster; tests/deploy/test_make_images.py "
    "runs `make images` with stand-ins for Docker and podman",
    "podman save -m": "needs podman's images and a kind cluster",
    "make images IMAGE_REPOSITORY": "needs Docker, a registry to push to and a cluster",
    "helm install runyard charts/runyard": "needs a Kubernetes cluster",
    "kind: TrainingJob": "a resource for a Kubernetes cluster running the controller; "
    "tests/service/custom_resources applies such resources to a Kubernetes API server",
    "kubectl apply -f bert-1.yaml": "needs a Kubernetes cluster running the controller",
    "kind: HyperparameterTuningJob": "a resource for a Kubernetes cluster running the "
    "controller; tests/service/custom_resources/test_tuning_controller.py applies such "
    "resources to a Kubernetes API server",
    "kubectl apply -f lr-search.yaml": "needs a Kubernetes cluster running the controller",
    "kubectl apply -f runyard-s3.yaml": "needs a Kubernetes cluster",
    "sudo mount -t nfs4": "needs root and an EFS or NFS export (the EC2 backend's artifacts)",
    "aws ec2 authorize-security-group-ingress": "needs an AWS account (EC2 security groups)",
    "AWS_ENDPOINT_URL_S3=http://127.0.0.1:9000": "needs an S3 endpoint (MinIO) and a second "
    "server; tests/e2e/test_sagemaker_sdk.py runs this setup against moto",
    "from sagemaker.pytorch import PyTorch": "needs the SageMaker SDK v2, which Runyard does "
    "not install; tests/e2e/test_sagemaker_sdk.py runs it in an environment of its own",
    "from sagemaker.train import ModelTrainer": "needs the SageMaker SDK v3, which Runyard "
    "does not install; tests/e2e/test_sagemaker_sdk.py runs it in an environment of its own",
    ".venv/bin/pip install -e '.[tensorflow]'": "would put TensorFlow into the .venv the "
    "suite runs from; tests/tensorflow makes an environment of its own with that extra",
    "--source-dir examples/tensorflow-ps": "needs TensorFlow where the instances run; "
    "tests/tensorflow/test_tensorflow_jobs.py runs this block against a server that has it",
    "--source-dir examples/tensorflow-mwms": "needs TensorFlow where the instances run; "
    "tests/tensorflow/test_tensorflow_jobs.py runs this block against a server that has it",
}
BLOCK_TIMEOUT = 280  # below the suite's per-test limit, so a hung block says which it was
# The jobs the pages stop on purpose; every other job must complete.
STOPPED_ON_PURPOSE = {"forever"}
# A shell block's output redirected into a file of the checkout: `> ci.token`.
_REDIRECTED = re.compile(r">\s*([\w.-]+)(?=\s|$)")
_FILE_HEADER = re.compile(r"# ([\w./-]+\.ya?ml)\n")
# Where the README's tour keeps what it makes (data, a spec file), out of the checkout.
TOUR = "/tmp/runyard-tour"


@dataclass(frozen=True)
class Block:
    page: str
    language: str
    text: str
    line: int

    @property
    def skipped_because(self) -> str | None:
        return next((why for marker, why in SKIPPED.items() if marker in self.text), None)

    @property
    def label(self) -> str:
        """A name for its files that no other block's has: the page and the line."""
        return f"{self.page.replace('/', '-')}-line-{self.line}"

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language})"


def blocks_of(page: str) -> list[Block]:
    """The blocks of ``page`` (a path from the repository's root) that run, in order."""
    return [
        Block(page, token.info.strip(), token.content, token.map[0] + 1 if token.map else 0)
        for token in MarkdownIt().parse((REPO / page).read_text())
        if token.type == "fence" and token.info.strip() in LANGUAGES
    ]


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


@dataclass
class Reader:
    """Someone following the README and its pages: a checkout to stand in, a shell
    environment, and the server the README's first block started."""

    checkout: Path
    scratch: Path
    tour: Path
    env: dict[str, str]
    url: str
    home: Path
    shells: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cloned = {entry.name for entry in self.checkout.iterdir()}

    def text(self, block: Block) -> str:
        """The block as this reader runs it: the tour's directory is the test's own."""
        return block.text.replace(TOUR, str(self.tour))

    def run(self, block: Block) -> tuple[int, str]:
        log = self.scratch / f"{block.label}.log"
        if block.language == "sh":
            command = ["bash", "-e", "-o", "pipefail", "-c", self.text(block)]
        else:
            # Outside the checkout, so `runyard` is imported as installed, as the server is.
            script = self.scratch / f"{block.label}.py"
            script.write_text(self.text(block))
            command = [str(self.checkout / ".venv" / "bin" / "python"), str(script)]
        with open(log, "wb") as output:
            # A session of its own: what a block leaves running in the background (the
            # server) is found and stopped through it at the end.
            process = subprocess.Popen(
                command,
                cwd=self.checkout,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.shells.append(process.pid)
            try:
                status = process.wait(scaled(BLOCK_TIMEOUT))
            except subprocess.TimeoutExpired:
                status = -1
        return status, log.read_text(errors="replace")

    def client(self) -> Client:
        return Client(self.url, admin_token(self.home))

    def stop(self) -> list[int]:
        """Stop what the blocks left running (the server as the reader would, with
        `runyard server stop`); returns the processes of jobs left behind."""
        job_ids = self._job_ids()
        subprocess.run(
            [str(self.checkout / ".venv" / "bin" / "runyard"), "server", "stop"],
            env=self.env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        for group in self.shells:
            _signal_group(group, signal.SIGTERM)
        if not _groups_gone(self.shells, timeout=60):
            for group in self.shells:
                _signal_group(group, signal.SIGKILL)
        leftovers = [pid for job_id in job_ids for pid in processes.marked_processes(job_id)]
        processes.signal_pids(leftovers, signal.SIGKILL)
        return leftovers

    def _job_ids(self) -> list[str]:
        try:
            with self.client() as client:
                return [client.get_job(item["name"])["id"] for item in _all_jobs(client)]
        except Exception:
            return []


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)


def _groups_gone(groups: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(group) for group in groups):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _all_jobs(client: Client) -> list[dict[str, object]]:
    items, cursor = [], None
    while True:
        page = client.list_jobs(limit=100, cursor=cursor)
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


# What a build writes into a checkout (the `pip wheel` of docs/deploying.md among them):
# made fresh in the reader's checkout, never linked to the repository's.
_BUILD_OUTPUTS = ("build", "dist", ".egg-info")


# Copied, not linked: blocks name them by file:// paths under the checkout, which the
# server (RUNYARD_FILE_ROOTS) takes only where no link leads out of it.
_COPIED = ("examples",)


def _checkout(root: Path) -> Path:
    """The repository's top-level entries linked into ``root``, and the .venv the tests run
    from: the pages' paths resolve, and what blocks write stays in ``root``."""
    root.mkdir()
    for entry in sorted(REPO.iterdir()):
        if entry.name in _COPIED:
            shutil.copytree(entry, root / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        elif not entry.name.startswith(".") and not entry.name.endswith(_BUILD_OUTPUTS):
            (root / entry.name).symlink_to(entry)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    base = tmp_path_factory.mktemp("readme")
    checkout = _checkout(base / "checkout")
    scratch = base / "blocks"
    scratch.mkdir()
    home = base / "runyard-home"
    port = free_port()
    venv_bin = checkout / ".venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(
        RUNYARD_HOME=str(home),
        RUNYARD_PORT=str(port),
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(checkout / ".venv"),
    )
    following = Reader(checkout, scratch, base / "tour", env, f"http://127.0.0.1:{port}", home)
    yield following
    assert following.stop() == [], "processes of the pages' jobs were left running"


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_block_runs_as_written(reader: Reader, block: Block) -> None:
    if block.skipped_because:
        pytest.skip(block.skipped_because)
    if block.language == "yaml":
        text = reader.text(block)
        named = _FILE_HEADER.match(text)
        if named is None:
            pytest.fail(f"{block}: a YAML block must say which file it is (# name.yaml)")
        # A name alone is a file of the checkout, where the reader stands.
        (reader.checkout / named.group(1)).write_text(text)
        return
    status, output = reader.run(block)
    assert status == 0, f"{block} exited {status}:\n{output[-6000:]}"
    if "runyard server --detach" in block.text:
        # The command returned once the server answered: it answers now.
        assert wait_until_up(reader.url, timeout=1), f"the server is not up:\n{output}"


def test_every_job_the_pages_made_ended_as_meant(reader: Reader) -> None:
    with reader.client() as client:
        jobs = {str(item["name"]): client.get_job(str(item["name"])) for item in _all_jobs(client)}
    assert jobs, "the pages' blocks made no job"
    for name, job in jobs.items():
        expected = "Stopped" if name in STOPPED_ON_PURPOSE else "Completed"
        assert job["status"] == expected, f"{name}: {job['status']}: {job['failure_reason']}"


def test_the_tour_leaves_the_checkout_as_cloned(reader: Reader) -> None:
    """What the README's blocks make (data, spec files, the code a spec names) is in the
    tour's directory; the checkout holds only what the other pages' blocks write there
    (``runyard token ... > ci.token``, a YAML block's file) and their builds."""
    written_by_pages = {
        name
        for block in BLOCKS
        if block.page != "README.md"
        for name in [
            *_REDIRECTED.findall(block.text),
            *_FILE_HEADER.findall(block.text if block.language == "yaml" else ""),
        ]
    }
    made = {entry.name for entry in reader.checkout.iterdir()} - reader.cloned
    left_by_the_readme = [
        name
        for name in sorted(made)
        if name not in written_by_pages and not name.endswith(_BUILD_OUTPUTS)
    ]
    assert left_by_the_readme == []
    assert (reader.tour / "data").is_dir()
    assert (reader.tour / "spec.yaml").is_file()


def test_every_metric_the_pages_define_is_found(reader: Reader) -> None:
    """A metric's regular expression must match what the example prints (`loss 0.4559`):
    each one every completed job defines has points."""
    defined = 0
    with reader.client() as client:
        for item in _all_jobs(client):
            job = client.get_job(str(item["name"]))
            if job["status"] != "Completed":
                continue
            for series in client.metrics(job["name"]):
                defined += 1
                assert series["points"], f"{job['name']}: {series['name']} matched no line"
    assert defined, "no job the pages ran defines a metric"


def test_every_skipped_block_is_one_of_the_pages() -> None:
    for marker in SKIPPED:
        found = [block for block in BLOCKS if marker in block.text]
        assert len(found) == 1, f"{marker!r} names {len(found)} blocks of the pages"


def test_every_page_with_blocks_is_one_of_the_pages_that_run() -> None:
    """A page of docs/ whose blocks are not in PAGES would never run, and could go wrong
    unseen."""
    unlisted = [
        page
        for page in sorted(str(path.relative_to(REPO)) for path in (REPO / "docs").rglob("*.md"))
        if page not in PAGES and blocks_of(page)
    ]
    assert unlisted == [], f"pages with blocks that do not run; add them to PAGES: {unlisted}"
