"""Sweeps: declare a grid of configs, run it, launch it on TPU VMs, report it.

``python -m softattn.sweep run|launch|report`` (see ``__main__``):

* ``grid``: ``sweep``/``product``/``zip_``/``chain`` build lists of overrides;
* ``declaration``: loads a sweep config file, checks every override against the
  base config before anything runs, names runs, builds their commands;
* ``runner``: runs the grid locally as ``softattn.main`` subprocesses, N at a
  time, skipping finished runs and resuming interrupted ones;
* ``launch``: prints ``gcloud compute tpus tpu-vm ssh ... --worker=all`` lines;
* ``records``: ``RunRecord``, a run's result read from its folder, and the
  records' CSV (what ``report`` and the studies build on);
* ``report``/``fit``/``plot``: table, saturating power-law fits, scaling plot.
"""

from softattn.sweep.declaration import RunSpec, Sweep, SweepError, load
from softattn.sweep.fit import FitError, PowerLawFit, fit_power_law
from softattn.sweep.grid import chain, fixed, product, sweep, zip_
from softattn.sweep.records import RunRecord

__all__ = ["RunSpec", "RunRecord", "Sweep", "SweepError", "load", "FitError",
           "PowerLawFit", "fit_power_law", "chain", "fixed", "product",
           "sweep", "zip_"]
