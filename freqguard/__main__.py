import sys

from freqguard.cli import main

sys.exit(main())
