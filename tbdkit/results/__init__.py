"""The run folder: its file names (files.py), RunDir (rundir.py: each file's path, reading and
writing), the atomic writers (sink.py), the Summary model, its reader and builder (summary.py)."""
