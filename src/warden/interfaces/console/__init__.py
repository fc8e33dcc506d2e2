"""`warden console`: the terminal console (Textual), tabs Workspaces, Sandbox, Grants, Approvals, Audit.

An interface like the CLI, and built on it: every action the console offers runs as the command
line a person would type (`warden lock notes`), through the CLI's own parser and handler
(`cli.main.dispatch`), so the console holds no rule of its own and shows that command beside
each result. Textual is imported only here, never by `warden --help` or any other command.
"""

__all__ = ["MIN_SIZE"]

# Below this the tabs' tables and details no longer fit: `warden console` refuses to start.
MIN_SIZE = (80, 24)
