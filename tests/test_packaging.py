"""The distributions are publishable: complete sdist, package-only wheel, and the wheel works alone.

The sdist and wheel are built once for the module, the way a release is built
(``python -m build``: the sdist first, the wheel from the unpacked sdist, so a file the package
needs but the sdist lacks fails the wheel build). ``--no-isolation`` builds against the installed
setuptools (the ``test`` extra's environment), with no network; ``build`` still checks the
``[build-system]`` requirements and fails if they are not met. The tools come with the ``test``
extra: a missing one fails these tests rather than skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, capture_output=True, text=True, encoding="utf-8", check=False, **kwargs
    )
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
        f"{result.stderr}"
    )
    return result


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # Build from a copy of the checkout without its `*.egg-info`: with no VCS plugin, setuptools
    # adds every file listed in an existing `SOURCES.txt` to the sdist, so a build in place would
    # keep files that an earlier build (or `pip install -e .`) listed even after MANIFEST.in lost
    # them, and this test could not see it. The copy also keeps the build's files out of the
    # checkout. Dot-folders (.git, caches) are not sdist material.
    source = tmp_path_factory.mktemp("source") / "torch-ndcg"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "*.egg-info", "__pycache__", "build", "dist", "lightning_logs"
        ),
    )
    out = tmp_path_factory.mktemp("dist")
    result = _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        cwd=source,
    )
    # No deprecation from the build backend (the SPDX `license` string and `license-files`
    # replace the `license = {text = ...}` table setuptools warns about).
    log = (result.stdout + result.stderr).splitlines()
    deprecations = [line for line in log if "deprecat" in line.lower()]
    assert not deprecations, "\n".join(deprecations)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    return {name.removeprefix(f"{top}/") for name in names if name != top}


def test_twine_check_strict(dists: tuple[Path, Path]) -> None:
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)])


def test_wheel_holds_the_package_and_license_only(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (metadata,) = (name for name in names if name.endswith(".dist-info/METADATA"))
        meta = zf.read(metadata).decode()
    dist_info = metadata.removesuffix("METADATA")
    assert f"{dist_info}licenses/LICENSE" in names
    assert "torch_ndcg/py.typed" in names
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "torch_ndcg").rglob("*.py")}
    assert package <= names
    stray = {n for n in names if not n.startswith(("torch_ndcg/", dist_info))}
    assert not stray, f"wheel holds files outside the package: {sorted(stray)}"
    assert "License-Expression: MIT" in meta
    assert "Classifier: License ::" not in meta


def test_sdist_is_complete(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    names = _sdist_names(sdist)
    required = {
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "pyproject.toml",
        "MANIFEST.in",
        "torch_ndcg/py.typed",
        "tests/__init__.py",
        "tests/conftest.py",
        "tests/references.py",
        "examples/data/rank.train",
    }
    # Everything the tests, examples, benchmarks and docs build read, as in the checkout now.
    for folder, pattern in [
        ("torch_ndcg", "*.py"),
        ("tests", "*.py"),
        ("examples", "*.py"),
        ("examples/data", "*"),
        ("benchmarks", "*.py"),
        ("docs", "*"),
        (".", "mkdocs.yml"),
    ]:
        required |= {
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / folder).glob(pattern if folder == "." else f"**/{pattern}")
            if p.is_file() and "__pycache__" not in p.parts
        }
    missing = required - names
    assert not missing, f"sdist lacks {sorted(missing)}"
    assert not [n for n in names if n.endswith((".pyc", ".pyo"))]


def test_wheel_alone_runs_quickstart(
    dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, wheel = dists
    work = tmp_path_factory.mktemp("wheel_alone")
    assert not work.resolve().is_relative_to(ROOT)
    site = work / "site"
    _run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"),
            *("--disable-pip-version-check", "--target", str(site), str(wheel)),
        ]
    )
    run_dir = work / "run"
    run_dir.mkdir()
    shutil.copy(ROOT / "examples" / "quickstart.py", run_dir)
    # PYTHONPATH entries come before site-packages, and setuptools' editable finder (a checkout
    # installed with `pip install -e`) sits after the path finder, so the wheel's copy wins;
    # the __file__ check below proves it rather than assuming it.
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONIOENCODING": "utf-8"}
    result = _run([sys.executable, "quickstart.py"], cwd=run_dir, env=env)
    assert "Järvelin DCG@6 = 8.10" in result.stdout
    where = _run(
        [sys.executable, "-c", "import torch_ndcg; print(torch_ndcg.__file__)"],
        cwd=run_dir,
        env=env,
    )
    imported = Path(where.stdout.strip()).resolve()
    assert imported.is_relative_to(site.resolve()), imported
