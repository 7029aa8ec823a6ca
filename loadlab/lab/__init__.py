"""`loadlab lab`: every bottleneck class provoked for real on the reference server.

scenarios.py holds the table (one row per provoked constraint), runner.py runs one scenario
(server, load, verdict), suite.py runs a list of them, table.py prints and writes the confusion
table. The lab starts processes, so it sits on top, beside the run conductor; it reads the
analyzer only through analysis.json.
"""
