"""resched's version: the one place it is written (pyproject.toml reads it from here).

A constant rather than ``importlib.metadata.version``: that lookup scans the installed
distributions (~30 ms), and every manifest and ``resched --version`` need the version."""

VERSION = "0.1.0"
