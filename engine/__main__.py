"""`python -m engine --model PATH --socket PATH ...`: run one engine for one lane."""

import sys

from .server import main

sys.exit(main())
