"""Where ``dedup`` keeps its jars and state: never in the installed package nor the current
folder (issue 34 item 2), and every error that needs jars names ``dedup fetch-jars``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dedup.cli.main import EXIT_CONFIG, main
from dedup.exceptions import MissingToolError
from dedup.local import jars, paths
from dedup.local import lasting as services


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This process as if the package were installed from its wheel (no checkout around it)."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(paths, "repo_root", lambda: site)
    monkeypatch.delenv("DEDUP_CACHE_DIR", raising=False)
    return site


def test_a_checkout_keeps_its_cache_in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEDUP_CACHE_DIR", raising=False)
    root = Path(__file__).resolve().parents[3]
    assert paths.source_checkout() == root
    assert paths.cache_dir() == root / ".cache"  # setup.sh, the tests and CI unchanged


def test_installed_it_uses_the_per_user_cache(installed: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths.source_checkout() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "spark-exactly-once-dedup"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "spark-exactly-once-dedup"
    # A relative XDG_CACHE_HOME is invalid by the XDG spec: ignored, not taken from the cwd.
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "spark-exactly-once-dedup"
    assert installed not in paths.cache_dir().parents


def test_the_environment_variable_wins_and_is_made_absolute(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEDUP_CACHE_DIR", "mine")
    assert paths.cache_dir() == tmp_path / "mine"


def test_the_option_sets_the_folder_for_the_command_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "before"))
    seen: list[Path] = []
    monkeypatch.setattr(services, "services_status",
                        lambda say: seen.append(services.state_path()) or [])
    # before the command and after it (both places of a global option)
    assert main(["--cache-dir", str(tmp_path / "a"), "services", "status"]) == 0
    assert main(["services", "status", "--cache-dir", str(tmp_path / "b")]) == 0
    assert seen == [tmp_path / "a" / "services" / "state.json",
                    tmp_path / "b" / "services" / "state.json"]
    assert os.environ["DEDUP_CACHE_DIR"] == str(tmp_path / "before")  # restored


def test_missing_jars_name_the_fetch_command(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DEDUP_KAFKA_JARS", raising=False)
    monkeypatch.delenv("DEDUP_SPARK_KAFKA_JARS", raising=False)
    for find in (paths.kafka_broker_jars, paths.spark_kafka_connector_jars):
        with pytest.raises(MissingToolError) as caught:
            find()
        message = str(caught.value)
        assert "dedup fetch-jars" in message and "setup.sh" not in message, message
        assert str(tmp_path / "cache" / "jars") in message


def test_fetch_jars_skips_complete_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DEDUP_KAFKA_JARS", raising=False)
    monkeypatch.delenv("DEDUP_SPARK_KAFKA_JARS", raising=False)
    cache = tmp_path / "cache"
    for name in ("kafka-broker", "spark-kafka-4.0.0"):
        folder = cache / "jars" / name
        folder.mkdir(parents=True)
        (folder / jars.pom_stamp()).touch()
        (folder / "x-1.jar").touch()

    def no_maven(*args: object) -> None:
        raise AssertionError("Maven ran for a complete folder")

    monkeypatch.setattr(jars, "_maven", no_maven)
    code = main(["--cache-dir", str(cache), "fetch-jars", "--spark-version", "4.0.0"])
    assert code == 0
    out = capsys.readouterr().out
    assert f"broker jars already there: 1 in {cache / 'jars' / 'kafka-broker'}" in out
    assert "connector jars already there" in out


def test_fetch_jars_refuses_a_version_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch-jars", "--spark-version", "4.0"]) == EXIT_CONFIG
    assert "exact version" in capsys.readouterr().err


def test_fetch_jars_without_maven_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither java nor mvn
    assert main(["--cache-dir", str(tmp_path / "cache"), "fetch-jars"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dedup: error: ") and "not found on PATH: install" in err, err
