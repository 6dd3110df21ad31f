"""``python -m pipeline.train_vlm ...``."""

from rmtl.console import finish

from pipeline.train_vlm.cli import main

finish(main())
