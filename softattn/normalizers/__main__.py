"""``python -m softattn.normalizers``: prints the README's normalizer table,
rendered from the registry; ``--kernels-table`` docs/kernels.md's table of
modes; ``--write`` rewrites both between their markers (``tables``)."""

from softattn.normalizers import tables

tables.main()
