"""The version of Warden, where both the package and the CLI read it."""

__version__ = "0.1.0"
