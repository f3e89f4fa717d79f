"""``python -m rlvr``: the ``rlvr`` command line (``rlvr.cli``)."""

from rlvr.cli import main
import sys
sys.exit(main())
