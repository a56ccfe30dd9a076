"""python -m tbdkit.describe: see tbdkit.describe.network."""

import sys

from tbdkit.describe.network import main

sys.exit(main())
