"""``python -m softattn.normalizers``: prints the README's normalizer table,
rendered from the registry (``registry.markdown_table``)."""

from softattn.normalizers import markdown_table

print(markdown_table())
