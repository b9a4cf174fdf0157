"""A comparison's report: finished runs collected into rows (collect.py), their intervals (stats.py,
paired.py), the floor a task's scores are read against (floor.py), and the files written (report.py,
figure.py)."""
