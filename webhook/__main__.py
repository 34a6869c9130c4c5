"""``python -m webhook``: see :mod:`webhook.cli`."""

import sys

from webhook.cli import main

sys.exit(main())
