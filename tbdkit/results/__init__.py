"""The run folder: its file names, its readers and the Summary model (tbdkit.results.summary)."""
