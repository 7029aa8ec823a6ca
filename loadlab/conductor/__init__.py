"""The run conductor, on top of the Locust users (as Locust keeps its runners apart from them):
`runloop.Conductor` runs a run step by step (users, collectors, run writer, live status line,
stop rules in `budget`), `livestats` is the one live counter, `recording` attaches the run
writer to the events, `webui` adds the LLM tab to Locust's web UI."""
