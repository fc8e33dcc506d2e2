"""`python -m warden` is `warden`."""

import sys

from warden.interfaces.cli.main import main

sys.exit(main())
