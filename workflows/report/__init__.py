"""The run report as a page: ``resched report RUN_DIR --html FILE``.

:mod:`.load` reads and checks a run's report and recomputes its numbers, :mod:`.view`
turns it into lanes of spans and marks, :mod:`.html` draws them (inline SVG, CSS, JS),
:mod:`.write` puts the file in place without touching anything resched did not write.
"""
