"""``python -m rmtl``: the same commands as the ``rmtl`` console script."""

from rmtl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
