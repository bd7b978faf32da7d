"""``python -m fxdeploy.cli``."""

import sys

from fxdeploy.cli.main import main

sys.exit(main())
