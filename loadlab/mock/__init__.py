"""A programmable mock of an OpenAI-compatible LLM endpoint (`loadlab mock`); see app.py."""
