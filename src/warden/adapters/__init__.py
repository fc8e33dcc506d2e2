"""Adapters: the only code that touches the filesystem, processes, the database and the network."""
