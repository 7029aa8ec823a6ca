"""The run folder: `run_folder.RunWriter` writes it during a run, `reader.load_run` reads it back."""
