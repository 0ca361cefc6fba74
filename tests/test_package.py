import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import eosclient

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


def test_sdist_and_wheel_carry_the_license(tmp_path: Path) -> None:
    # Builds as a user would (isolated, from the sdist): the wheel is made from the sdist, so a
    # file missing from the sdist is missing from the wheel too.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (sdist,) = tmp_path.glob("eosclient-*.tar.gz")
    (wheel,) = tmp_path.glob("eosclient-*.whl")
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
