"""A job's process, confined: the job's user, no capabilities, the server's paths hidden,
what it needs bound back read-only, the instance's scratch directory as /tmp; and none of
it reaching the caller's mount namespace. Run as root, as an instance's runtime is."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtime.linux import confine
from runtime.linux.confine import JOB_UID_BASE, JOB_UID_COUNT, Confinement, job_uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="confining takes root")

UID = JOB_UID_BASE + 4242
# The interpreter the probes run with, which may lie below root's 0700 home (pyenv's).
PYTHON = (sys.prefix, sys.base_prefix)


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    """A server's home with a secret and an image store in it, a directory closed to
    other users with an interpreter-like tree below, and an instance's scratch."""
    home = tmp_path / "home"
    (home / "secret").mkdir(parents=True)
    (home / "token").write_text("the admin token")
    (home / "images" / "python").mkdir(parents=True)
    (home / "images" / "python" / "lib.py").write_text("image")
    closed = tmp_path / "closed"
    (closed / "versions").mkdir(parents=True)
    (closed / "versions" / "lib.py").write_text("interpreter")
    closed.chmod(0o700)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    # pytest's own directory is root's 0700: the confined process could not pass it.
    tmp_path.chmod(0o755)
    return {"home": home, "closed": closed, "scratch": scratch}


def _run(how: Confinement, script: str) -> dict[str, object]:
    """What ``script`` (Python, printing one JSON object) finds when run confined."""
    argv, env = how.start([sys.executable, "-I", "-c", script], {"PATH": "/usr/bin:/bin"})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _probe(how: Confinement, machine: dict[str, Path], body: str) -> dict[str, object]:
    home, closed = machine["home"], machine["closed"]
    script = f"""
import json, os, sys
def attempt(call):
    try:
        return call()
    except OSError as exc:
        return type(exc).__name__
home, closed = {str(home)!r}, {str(closed)!r}
{body}
"""
    return _run(how, script)


def test_a_confined_process_is_the_jobs_user_without_capabilities(
    machine: dict[str, Path],
) -> None:
    how = Confinement(uid=UID, hidden=(str(machine["home"]),), read_only=PYTHON)
    found = _probe(
        how,
        machine,
        """
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print(json.dumps({
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
    "groups": [g for g in os.getgroups() if g != os.getgid()],
    "caps": [status[k].strip() for k in ("CapEff", "CapPrm", "CapAmb")],
    "no_new_privs": status["NoNewPrivs"].strip(),
    # Root's own process (the caller's init here) keeps its environment to itself.
    "init_environ": attempt(lambda: len(open("/proc/1/environ", "rb").read())),
}))
""",
    )
    assert found["ids"] == [UID] * 4
    assert found["groups"] == []
    assert found["caps"] == ["0000000000000000"] * 3
    assert found["no_new_privs"] == "1"
    assert found["init_environ"] == "PermissionError"


def test_the_servers_home_is_hidden_and_what_is_kept_is_read_only(
    machine: dict[str, Path],
) -> None:
    home, closed = machine["home"], machine["closed"]
    how = Confinement(
        uid=UID,
        hidden=(str(home),),
        read_only=(*PYTHON, str(home / "images"), str(closed / "versions")),
    )
    found = _probe(
        how,
        machine,
        """
import subprocess
print(json.dumps({
    "home": sorted(os.listdir(home)),
    "token": attempt(lambda: open(os.path.join(home, "token")).read()),
    "image": open(os.path.join(home, "images", "python", "lib.py")).read(),
    "write_image": attempt(lambda: open(os.path.join(home, "images", "new"), "w")),
    "write_home": attempt(lambda: open(os.path.join(home, "new"), "w")),
    "interpreter": open(os.path.join(closed, "versions", "lib.py")).read(),
    "closed": sorted(os.listdir(closed)),
    "unmount": subprocess.run(["umount", home], capture_output=True).returncode,
}))
""",
    )
    assert found["home"] == ["images"]
    assert found["token"] == "FileNotFoundError"
    assert found["image"] == "image"
    assert found["write_image"] == "OSError"  # EROFS
    assert found["write_home"] == "OSError"
    # Below a directory closed to other users: reached once bound back, nothing else.
    assert found["interpreter"] == "interpreter"
    assert found["closed"] == ["versions"]
    assert found["unmount"] != 0
    # The caller's namespace saw none of it.
    assert (home / "token").read_text() == "the admin token"
    assert sorted(p.name for p in home.iterdir()) == ["images", "secret", "token"]


def test_a_writable_path_below_a_cover_is_the_one_place_written(
    machine: dict[str, Path],
) -> None:
    """The job's layer, bound back writable while the job's user installs into it."""
    home = machine["home"]
    layer = home / "jobs" / "job-env"
    layer.mkdir(parents=True)
    os.chown(layer, UID, UID)
    how = Confinement(uid=UID, hidden=(str(home),), read_only=PYTHON, writable=(str(layer),))
    found = _probe(
        how,
        machine,
        f"""
layer = {str(layer)!r}
print(json.dumps({{
    "layer": attempt(lambda: open(os.path.join(layer, "pkg.py"), "w").write("x")),
    "beside": attempt(lambda: open(os.path.join(home, "jobs", "other"), "w")),
    "token": attempt(lambda: open(os.path.join(home, "token")).read()),
}}))
""",
    )
    assert found == {"layer": 1, "beside": "OSError", "token": "FileNotFoundError"}
    assert (layer / "pkg.py").read_text() == "x"


def test_tmp_is_the_instances_scratch_directory(machine: dict[str, Path]) -> None:
    scratch = machine["scratch"]
    how = Confinement(uid=UID, private={"/tmp": str(scratch)}, read_only=PYTHON)
    found = _probe(
        how,
        machine,
        """
with open("/tmp/from-the-job", "w") as f:
    f.write("mine")
print(json.dumps({"tmp": sorted(os.listdir("/tmp"))}))
""",
    )
    # Besides the job's file, only the mount points of what is bound back below /tmp (the
    # interpreter, where the checkout lies in /tmp).
    bound_back = {Path(p).parts[2] for p in PYTHON if Path(p).is_relative_to("/tmp")}
    assert set(found["tmp"]) - bound_back == {"from-the-job"}
    made = scratch / "from-the-job"
    assert made.read_text() == "mine"
    assert made.stat().st_uid == UID


def test_a_mount_point_the_job_planted_refuses_the_start(machine: dict[str, Path]) -> None:
    """The job writes its /tmp; had it put a link where a kept path's mount point goes,
    root would follow it making the mount point: the start is refused instead, and
    nothing is made where the link points."""
    scratch = machine["scratch"]
    # A kept path below /tmp whose parents any user may pass (a checkout in /tmp, say).
    parent = Path(tempfile.mkdtemp(prefix="runyard-kept-", dir="/tmp"))
    parent.chmod(0o755)
    kept = parent / "env"
    kept.mkdir()
    # Outside /tmp, which the confined process sees as the scratch directory.
    elsewhere = Path(tempfile.mkdtemp(prefix="runyard-confine-", dir="/run"))
    try:
        # As seen through the job's /tmp: the kept path's parent, a link of the job's.
        planted = scratch / parent.name
        os.symlink(elsewhere, planted)
        os.lchown(planted, UID, UID)
        how = Confinement(uid=UID, private={"/tmp": str(scratch)}, read_only=(str(kept),))
        argv, env = how.start(["true"], {"PATH": "/usr/bin:/bin"})
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        made = sorted(p.name for p in elsewhere.iterdir())
    finally:
        shutil.rmtree(elsewhere)
        shutil.rmtree(parent)
    assert done.returncode == 126
    # Runyard's failure, not the script's.
    reason = confine.refusal(done.returncode, done.stderr.splitlines())
    assert reason is not None
    assert reason.startswith("InternalServerError: could not confine the job's process: ")
    assert made == []


def test_job_users_differ_by_job_and_stay_in_their_range() -> None:
    uids = {job_uid(f"job-{n}") for n in range(1000)}
    assert len(uids) == 1000
    assert all(JOB_UID_BASE <= uid < JOB_UID_BASE + JOB_UID_COUNT for uid in uids)
    assert job_uid("job-1") == job_uid("job-1")


def test_the_jobs_environment_reaches_its_process_and_not_the_confining_one(
    machine: dict[str, Path],
) -> None:
    """The confining interpreter is root until it drops: a job's LD_PRELOAD must not load
    into it. The loader says so once for each process that has a library it cannot load:
    once here, for the job's own process, which gets the whole environment."""
    how = Confinement(uid=UID, read_only=PYTHON, handover_dir=str(machine["home"]))
    job_env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "/no/such/library.so", "MINE": "yes"}
    argv, env = how.start(["sh", "-c", 'echo "MINE=$MINE"'], job_env)
    assert env == {"PATH": confine.CONFINER_PATH}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MINE=yes"
    assert done.stderr.count("/no/such/library.so") == 1, done.stderr
    # The environment waited in a file of root's, removed once read.
    assert [p.name for p in machine["home"].iterdir() if p.name.startswith("env-")] == []


def test_a_bad_confinement_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env_file = tmp_path / "env.json"
    env_file.write_text("{}")
    argv = [
        *(sys.executable, "-I", "-m", "runtime.linux.confine", "{not json"),
        *(str(env_file), "--", "touch"),
    ]
    done = subprocess.run([*argv, str(marker)], capture_output=True, text=True, check=False)
    assert done.returncode == 126
    assert not marker.exists()


def test_a_confined_process_may_not_make_namespaces_or_mounts(machine: dict[str, Path]) -> None:
    """The job's user could otherwise make a user namespace of its own, and be root there
    (this machine lets any user); seccomp refuses it, and mounts, with EPERM."""
    how = Confinement(uid=UID, read_only=PYTHON)
    found = _probe(
        how,
        machine,
        """
import ctypes, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def call(result):
    return ctypes.get_errno() if result != 0 else 0
print(json.dumps({
    "unshare_user": call(libc.unshare(0x10000000)),
    "mount": call(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "unshare_tool": subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode,
    # What training does start still starts: threads and processes.
    "child": subprocess.run(["true"]).returncode,
}))
""",
    )
    assert found["unshare_user"] == errno.EPERM
    assert found["mount"] == errno.EPERM
    assert found["unshare_tool"] != 0
    assert found["child"] == 0
