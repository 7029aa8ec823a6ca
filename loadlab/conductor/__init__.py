"""The run conductor, on top of the Locust users (as Locust keeps its runners apart from them)."""
