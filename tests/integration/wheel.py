"""Installing trionsq as a user does: an sdist from the checkout's tracked files (what a clean
clone has), a wheel built from that sdist, installed into a fresh venv without the test extras.
pip fetches the build backend and the runtime dependencies from the package index, as a user's
install does. Used through the `installed` fixture (conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked_files(dest: Path) -> None:
    """The checkout's tracked files (what a clean clone has) copied to `dest`."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.fail("the wheel test builds from the checkout's tracked files: git ls-files failed")
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def run_ok(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run`, text captured; asserts exit status 0 (showing stderr's end)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def install_wheel(work: Path) -> Path:
    """Make an sdist from the checkout's tracked files, a wheel from it, and install the wheel
    into a fresh venv under `work`; returns the venv's bin directory."""
    source, dist = work / "source", work / "dist"
    source.mkdir()
    _tracked_files(source)
    run_ok([sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)], cwd=source)
    (sdist,) = dist.glob("trionsq-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "docs/spark.md", "trionsq/protocol/crc32c_impl.h", "setup.py"):
        assert needed in names, f"the sdist lacks {needed}"

    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    run_ok([*pip, "wheel", "--no-deps", "-w", str(dist), str(sdist)])
    (wheel,) = dist.glob("trionsq-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        contents = whl.namelist()
    assert any(n.endswith("dist-info/LICENSE") or "/licenses/LICENSE" in n for n in contents)
    assert any(n.startswith("trionsq/nsqadmin/static/") for n in contents)
    assert any(n.startswith("trionsq/protocol/_speedups") for n in contents), "no compiled loop"
    run_ok([*pip, "install", str(wheel)])
    return bin_dir
