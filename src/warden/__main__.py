"""`python -m warden` is `warden` (through the home's daemon where it can: interfaces/cli/entry.py)."""

from warden.interfaces.cli.entry import main

main()
