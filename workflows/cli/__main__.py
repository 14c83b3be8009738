"""``python -m workflows.cli`` runs the resched command line."""

from workflows.cli import main

main(prog_name="resched")
