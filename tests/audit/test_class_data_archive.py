"""When mover-audit's driver JVM writes or maps the class-data archive (mover/audit/spark.py,
docs/audit.md#performance): never with a directory holding files on the class path Spark's launcher builds, which the
JDK refuses to archive (it prints "Cannot have non-empty directory in paths" on stdout at every command). The JVM's
own side, the archive written at exit and nothing said: test_pipeline_jvm.py's
test_a_command_that_succeeds_writes_nothing_to_stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.audit import spark


@pytest.fixture
def archive_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (spark.CDS_ENV, "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(spark.CDS_DIR_ENV, str(tmp_path / "cds"))
    if spark._cds_archive() is None:
        pytest.skip("no JDK where Spark's launcher looks")
    return tmp_path


def test_the_first_jvm_writes_the_archive_and_later_ones_map_it(archive_env: Path) -> None:
    options, dump = spark._cds_options(may_write=True)
    assert dump is not None and "-XX:ArchiveClassesAtExit=" in options
    tmp, archive = dump
    assert tmp.parent == archive.parent == archive_env / "cds" and tmp != archive
    archive.write_bytes(b"")
    assert spark._cds_options(may_write=True) == (f"-XX:SharedArchiveFile={archive} {spark._CDS_QUIET}", None)


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"])
def test_no_archive_with_a_filled_directory_on_the_class_path(archive_env: Path, variable: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    conf = archive_env / "conf"
    conf.mkdir()
    monkeypatch.setenv(variable, str(conf))
    assert spark._cds_options(may_write=True)[1] is not None  # empty: the JDK archives it
    (conf / "spark-defaults.conf").write_text("")
    assert spark._cds_options(may_write=True) == ("", None)
    archive = spark._cds_archive()
    assert archive is not None
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"")
    assert spark._cds_options(may_write=True) == ("", None)  # nor mapped: it was made for another class path


def test_off_means_neither(archive_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spark.CDS_ENV, "off")
    assert spark._cds_options(may_write=True) == ("", None)
