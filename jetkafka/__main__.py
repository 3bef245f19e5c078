import sys

from jetkafka.cli import main

sys.exit(main())
