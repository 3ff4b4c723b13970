"""Training images made here for the custom-container tests, never pulled from a registry:
a root filesystem of Debian's own packages (Python 3.11 and what it needs, busybox for a
shell), with a ``train`` program, imported into podman's store with ``podman import``.

    plain    ``train`` is a program of the test's own (a bring-your-own container)
    toolkit  SageMaker's training toolkit from the suite's wheelhouse, whose ``train``
             runs the job's SAGEMAKER_PROGRAM, as in the frameworks' own containers

The packages are fetched once per machine with ``apt-get download`` into
``~/.cache/runyard-tests/debian``; an image is made once per machine and recipe (its tag
is the recipe's digest), so a warm run only looks it up.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from tests.toolkit_wheels import wheelhouse

CACHE = Path.home() / ".cache" / "runyard-tests" / "debian"
PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "python3-minimal", "libstdc++6",
            "busybox-static")  # fmt: skip
SITE = "usr/local/lib/python3.11/dist-packages"
# Part of each image's tag: raised when the way an image is made here changes.
RECIPE = 2
TIMEOUT = 900

# A bring-your-own container's program: what SageMaker's contract gives it, and a model.
PLAIN_TRAIN = """\
#!/usr/bin/python3
import json, os, socket, sys
config = "/opt/ml/input/config"
hyperparameters = json.load(open(f"{config}/hyperparameters.json"))
resources = json.load(open(f"{config}/resourceconfig.json"))
train = "/opt/ml/input/data/train"
shown = ("MY_", "RUNYARD_", "SM_CURRENT_HOST", "SM_MODEL_DIR", "TRAINING_JOB_NAME", "PATH")
seen = {
    "hostname": socket.gethostname(),
    "resolved": {h: socket.gethostbyname(h) for h in resources["hosts"]},
    "hyperparameters": hyperparameters,
    "environment": {k: v for k, v in os.environ.items() if k.startswith(shown)},
    "files": sorted(os.listdir(train)) if os.path.isdir(train) else [],
}
print("container " + json.dumps(seen), flush=True)
if json.loads(hyperparameters.get("fail", "false")):
    open("/opt/ml/output/failure", "w").write("ValueError: the container was told to fail")
    sys.exit(3)
if json.loads(hyperparameters.get("wait", "false")):
    import time
    print("waiting", flush=True)
    time.sleep(600)
os.makedirs("/opt/ml/model", exist_ok=True)
open(f"/opt/ml/model/{resources['current_host']}.txt", "w").write("weights")
"""
TOOLKIT_TRAIN = """\
#!/usr/bin/python3
from sagemaker_training.cli.train import main
main()
"""


def image(kind: str) -> str:
    """The reference of the test image ``kind`` (plain or toolkit), made first if this
    machine's podman does not have it."""
    recipe = _recipe(kind)
    tag = f"localhost/runyard-test-{kind}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"image-{kind}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be making it now
        if subprocess.run(["podman", "image", "exists", tag], check=False).returncode != 0:
            _make(kind, tag)
    return tag


def _recipe(kind: str) -> str:
    train = PLAIN_TRAIN if kind == "plain" else TOOLKIT_TRAIN
    made = {"packages": PACKAGES, "train": train, "toolkit": kind == "toolkit", "recipe": RECIPE}
    return json.dumps(made)


def _make(kind: str, tag: str) -> None:
    with tempfile.TemporaryDirectory(prefix="runyard-image-") as scratch:
        root = Path(scratch) / "root"
        for deb in _debs():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (root / "opt" / "ml").mkdir(parents=True)
        # busybox's applets (sh, which, ...) as links to it, where a package has none.
        applets = subprocess.run([str(root / "bin" / "busybox"), "--list"], check=True,
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
        for applet in applets:
            link = root / "bin" / applet
            if not link.exists() and not link.is_symlink():
                link.symlink_to("busybox")
        if kind == "toolkit":
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                 "--find-links", str(wheelhouse()), "--target", str(root / SITE),
                 "sagemaker-training"],
                check=True,
                timeout=TIMEOUT,
            )  # fmt: skip
        train = root / "usr" / "local" / "bin" / "train"
        train.parent.mkdir(parents=True, exist_ok=True)
        train.write_text(textwrap.dedent(PLAIN_TRAIN if kind == "plain" else TOOLKIT_TRAIN))
        train.chmod(0o755)
        tarball = Path(scratch) / "root.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
        subprocess.run(
            ["podman", "import", "--change", "WORKDIR /opt/ml", "--change",
             "ENV PATH=/usr/local/bin:/usr/bin:/bin", str(tarball), tag],
            check=True,
            capture_output=True,
            timeout=TIMEOUT,
        )  # fmt: skip


def _debs() -> list[Path]:
    """The packages and every package they need, as .deb files, fetched once."""
    names = _closure(PACKAGES)
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    missing = [name for name in names if not list(debs.glob(f"{name}_*.deb"))]
    if missing:
        subprocess.run(["apt-get", "download", "-q", *missing], cwd=debs, check=True,
                       capture_output=True, timeout=TIMEOUT)  # fmt: skip
    return sorted(next(debs.glob(f"{name}_*.deb")) for name in names)


def _closure(packages: tuple[str, ...]) -> list[str]:
    listed = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        check=True,
        capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    # Indented lines are the relations; <name> is a virtual package, provided by another.
    return sorted({line for line in listed.splitlines() if line and line[0] not in " <"})
