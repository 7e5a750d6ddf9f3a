"""``python -m auditor``: the same command line as the ``auditor`` script."""

from auditor.cli import main

main(prog_name="auditor")
