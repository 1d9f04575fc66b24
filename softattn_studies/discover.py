"""The studies of an experiments folder, found once for every reader: the
commands (``python -m softattn_studies``) and the pre-registration checker,
which must not import the report engine (``study``) that reads its
registration files."""

from __future__ import annotations

import os

from softattn import config_files


def studies_in(experiments: str):
  """(name, Study, path of its runs.csv or None) for each study folder of
  ``experiments`` (a folder with a ``report.py`` declaring ``STUDY``)."""
  for name in sorted(os.listdir(experiments)):
    rep = os.path.join(experiments, name, "report.py")
    if not os.path.exists(rep):
      continue
    study = config_files.load_module(rep).STUDY
    csv_path = os.path.join(experiments, name, study.csv_name)
    yield name, study, csv_path if os.path.exists(csv_path) else None
