"""`python -m warden` is `warden` (through the home's daemon where it can: interfaces/cli/entry.py)."""

try:
    from warden.interfaces.cli.entry import main
except KeyboardInterrupt:
    # Ctrl-C while Python loads the entry module, before main() takes it: the native client
    # holds it across its exec of Python, `python -m warden` has no client to. Said as main()
    # says it (nothing ran), not a traceback.
    import os
    import sys

    sys.stderr.write("warden: interrupted\n")
    sys.stderr.flush()
    os._exit(130)

main()
