"""The package as users get it: the version, the license, and a wheel built with ``python -m
build`` that installs into a fresh virtual environment with its metadata, extras, entry point
and license intact, without the source tree (README.md's Install section)."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import eosclient
from doc_snippets import ADDRESS, PAGES, run_alone, runnable
from eosclient.testing.brokers import start_broker

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_pep440_dev_release() -> None:
    assert eosclient.__version__ == "0.1.0.dev0"


def test_import_raises_no_deprecation_warning() -> None:
    # kafka-python 3.0's import-time importlib.resources warnings used to fail this import.
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c",
         "import eosclient, eosclient.cli, eosclient.testing"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]


def test_license_file_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist and a wheel, built as a user would (isolated, the wheel from the sdist: a
    file missing from the sdist is missing from the wheel too)."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return out


def test_sdist_and_wheel_carry_the_license(dist: Path) -> None:
    (sdist,) = dist.glob("eosclient-*.tar.gz")
    (wheel,) = dist.glob("eosclient-*.whl")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(name.endswith("/LICENSE") and name.count("/") == 1 for name in names), names
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), names
    assert b"License-Expression: Apache-2.0" in metadata
    # The build reads the version from eosclient._version: the wheel must carry the same one.
    assert f"\nVersion: {eosclient.__version__}\n".encode() in metadata
    assert wheel.name.startswith(f"eosclient-{eosclient.__version__}-"), wheel.name


# Read in the fresh environment: what its installed eosclient says about itself.
_INSPECT = """
import importlib.metadata as md, json, eosclient
d = md.distribution("eosclient")
license = next(f for f in d.files if f.name == "LICENSE")
print(json.dumps({
    "file": eosclient.__file__, "version": eosclient.__version__, "dist_version": d.version,
    "license": d.metadata["License-Expression"], "python": d.metadata["Requires-Python"],
    "extras": d.metadata.get_all("Provides-Extra"), "requires": d.metadata.get_all("Requires-Dist"),
    "entry_points": [[e.group, e.name, e.value] for e in d.entry_points],
    "files": [str(f) for f in d.files], "license_text": license.read_text()[:300],
}))
"""


def _dependency_dirs() -> list[str]:
    """Where this environment's copies of eosclient's dependencies are (not eosclient)."""
    dirs = set()
    for module in ("kafka", "tenacity", "crc32c", "scramp"):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, module
        origin = Path(spec.origin)
        dirs.add(str(origin.parents[1] if spec.submodule_search_locations else origin.parent))
    return sorted(dirs)


def test_the_wheel_installs_in_a_fresh_venv(dist: Path, tmp_path: Path) -> None:
    # README.md said `pip install eosclient`, which fails (not on the index), and nothing said
    # how to install from a clone or a wheel. The documented wheel must stand on its own.
    (wheel,) = dist.glob("eosclient-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    # No PYTHONPATH: a source tree on it is an eosclient pip takes as installed already.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The wheel alone from here; its dependencies from this environment's copies, put on the
    # new one's path by a .pth (no package index needed; eosclient itself is not among them).
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", str(wheel)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "Successfully installed" in done.stdout, done.stdout
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "eosclient-test-dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    shown = subprocess.run([str(python), "-I", "-c", _INSPECT], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    seen = json.loads(shown.stdout)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert Path(seen["file"]).is_relative_to(site)  # the wheel's copy, not the source tree
    assert seen["version"] == seen["dist_version"] == eosclient.__version__
    assert (seen["license"], seen["python"]) == ("Apache-2.0", project["requires-python"])
    assert "Apache License" in seen["license_text"]
    assert any(f.endswith("licenses/LICENSE") for f in seen["files"])
    assert "eosclient/py.typed" in seen["files"]
    assert set(seen["extras"]) == set(project["optional-dependencies"])
    for extra, needs in project["optional-dependencies"].items():
        for need in needs:
            name = need.split("[")[0].split("=")[0].split(">")[0].split("<")[0]
            assert any(r.startswith(name) and f'extra == "{extra}"' in r
                       for r in seen["requires"]), (extra, need, seen["requires"])
    for need in project["dependencies"]:
        assert any(r.startswith(need.split(">")[0].split("=")[0]) and "extra ==" not in r
                   for r in seen["requires"]), need
    assert ["console_scripts", "eosclient", "eosclient.cli:main"] in seen["entry_points"]

    command = venv / "bin" / "eosclient"
    version = subprocess.run([str(command), "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120, check=False)
    assert version.stdout.strip() == f"eosclient {eosclient.__version__}", version.stderr
    no_broker = subprocess.run([str(command), "topics", "list"], cwd=tmp_path,
                               env={k: v for k, v in env.items()
                                    if k != "EOSCLIENT_BOOTSTRAP_SERVERS"},
                               capture_output=True, text=True, timeout=120, check=False)
    assert no_broker.returncode == 2 and "EOSCLIENT_BOOTSTRAP_SERVERS" in no_broker.stderr


@pytest.mark.long
@pytest.mark.broker
@pytest.mark.noida
@pytest.mark.timeout(1800)
def test_the_documented_install_runs_every_block(dist: Path, tmp_path: Path) -> None:
    # The whole first hour, as a new user has it: a fresh venv, the wheel installed the way
    # README.md says (its dependencies from the package index, so this needs the network),
    # then every runnable python block of the README and docs/, each alone, with that venv's
    # interpreter, against a broker per page. Long: downloading the dependencies takes minutes.
    (wheel,) = dist.glob("eosclient-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The testing extra: docs/testing.md's blocks use the mock cluster and the proxy.
    done = subprocess.run([python, "-m", "pip", "install", "--quiet", f"{wheel}[testing]"],
                          env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for page in PAGES:
        blocks = runnable(page)
        if not blocks:
            continue
        work = tmp_path / page.stem
        work.mkdir()
        with start_broker("noida", data_dir=work / "data", log_dir=work) as broker:
            for snippet in blocks:
                run_alone(snippet, {ADDRESS: broker.bootstrap_servers}, work, python=python,
                          env=env)
