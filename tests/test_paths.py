"""softattn.paths on local disk (tests/test_gcs.py covers gs://)."""

import os

import pytest

from softattn import paths, workdir_check


def test_relative_paths_stay_relative_when_joined_and_absolute_for_orbax(
    tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert paths.join("run", "checkpoints") == os.path.join("run", "checkpoints")
  assert str(paths.path("run")) == os.path.join(str(tmp_path), "run")
  assert str(paths.path("gs://b/run")) == "gs://b/run"
  assert paths.join("gs://b/run", "status.json") == "gs://b/run/status.json"
  assert paths.is_remote("gs://b/run") and not paths.is_remote("run")


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path):
  p = tmp_path / "sub" / "status.json"
  paths.write_json(p, {"state": "running"})
  paths.write_json(p, {"state": "done"})
  assert paths.read_json(p) == {"state": "done"}
  assert os.listdir(tmp_path / "sub") == ["status.json"]
  assert paths.read_json(tmp_path / "missing.json") is None


def test_a_log_is_the_file_then_its_parts_and_torn_lines_are_skipped(tmp_path):
  p = tmp_path / "metrics.jsonl"
  for k in range(2):  # two attempts append to the same local file
    log = paths.AppendLog(p)
    log.write(f'{{"step": {k}}}\n')
    log.close()
  assert p.read_text() == '{"step": 0}\n{"step": 1}\n'
  # A run directory copied from a bucket has parts too; a kill tore a line.
  (tmp_path / "metrics.jsonl.part-000001").write_text('{"step": 3}\n')
  (tmp_path / "metrics.jsonl.part-000000").write_text('{"step": 2}\n{"st')
  (tmp_path / "metrics.jsonl.part-x").write_text('{"step": 99}\n')  # not a part
  assert [r["step"] for r in paths.read_json_lines(p)] == [0, 1, 2, 3]
  paths.remove_log(p)
  assert os.listdir(tmp_path) == ["metrics.jsonl.part-x"]
  assert paths.read_log(p) == b""


def test_check_writable_creates_the_folder_or_says_why_not(tmp_path):
  assert workdir_check.check_writable(tmp_path / "a" / "b") == str(tmp_path / "a" / "b")
  assert os.listdir(tmp_path / "a" / "b") == []  # the probe was removed
  (tmp_path / "file").write_text("")
  with pytest.raises(paths.PathError, match="cannot write the workdir here"):
    workdir_check.check_writable(tmp_path / "file" / "run")
