"""Use cases: each service takes its ports and settings as parameters and returns frozen results."""
