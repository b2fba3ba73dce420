import os
import sys

from .cli import main

try:
    sys.exit(main())
except BrokenPipeError:  # the reader went away (`... | head -1`): nothing more to say, and no traceback
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own recipe: no error at exit either
    sys.exit(1)
