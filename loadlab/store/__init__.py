"""The run folder: `schema` holds its records and format version, `run_folder.RunWriter` writes it
during a run, `reader.load_run` reads it back. The bottom of the house: imports no other part of loadlab
but the helpers (clock, config, errors)."""
