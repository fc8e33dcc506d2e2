"""Warden's git credential helper: `python -I -m warden.adapters.git_credential get|store|erase`.

git runs it (credential.helper, set by adapters/git.py on the one git command that needs a
credential) and writes the request on stdin (gitcredentials(7)); it answers from variables in
its environment, which Warden set for that one git process only, so a token is never in any
argv, URL or config file. The decision (which host, which protocol) is core.git.credential_answer.
"""

from __future__ import annotations

import os
import sys

from warden.core.git import credential_answer


def main(argv: list[str]) -> int:
    operation = argv[1] if len(argv) > 1 else ""
    request = sys.stdin.read(64 * 1024)
    sys.stdout.write(credential_answer(request, os.environ, operation))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
