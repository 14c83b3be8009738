"""Data package: the workflow templates shipped with resched (see ``resched templates``)."""
