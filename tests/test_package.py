import eosclient


def test_version_is_pep440_dev_release() -> None:
    assert eosclient.__version__ == "0.1.0.dev0"
