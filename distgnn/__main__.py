import sys

from distgnn.cli import main

sys.exit(main())
